"""An agent's snapshot checkpoint kept in Postgres, read back by another process's
Checkpoints (o_evolution/checkpoints.py) as it was kept, and not used when it is not of this
log or of this format. Real NATS and Postgres."""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.events import BlockCreated
from o_contracts.ids import new_id
from o_contracts.models import BlockSpec, ChatMessage, ToolCall
from o_evolution.checkpoints import Checkpoints
from o_executor.shadow import checkpoint_codec
from o_executor.shadow.snapshot import (
    AgentFold,
    BlockFold,
    Checkpoint,
    ConversationFold,
    Folding,
)
from o_runtime.eventlog import EventLog


async def a_checkpoint(eventlog: EventLog) -> Checkpoint:
    """Folds of an agent's subject and a block's, as of an event really in the log."""
    block_id = new_id("block")
    appended = await eventlog.append(
        subjects.block_subject(block_id),
        Envelope.wrap(
            BlockCreated(block_id=block_id, spec=BlockSpec(label="human", value="v")),
            aggregate_id=block_id,
            producer="test",
        ),
    )
    said = ChatMessage(
        id="message-2",
        role="assistant",
        content="Noted.",
        tool_calls=[ToolCall(id="call-1", name="memory_insert", arguments='{"a": 1}')],
        stdout=["out"],
    )
    conversation = ConversationFold(
        messages={"message-2": (7 << 16, said, "run-1")},
        seen={"message-1": 3 << 16, "message-2": 7 << 16},
    )
    agent = AgentFold(fields={"id": "agent-1", "tool_ids": ["tool-1"]}, blocks={block_id: 1})
    block = BlockFold({"id": block_id, "label": "human", "value": "v", "version": 1})
    return Checkpoint(
        appended.seq,
        {
            subjects.agent_subject("agent-1"): Folding((agent, conversation), appended.seq - 1),
            subjects.block_subject(block_id): Folding((block,), appended.seq),
        },
    )


async def test_a_checkpoint_kept_is_read_back_by_another_process_as_it_was(
    eventlog: EventLog, pool: asyncpg.Pool
) -> None:
    agent_id = new_id("agent")
    checkpoint = await a_checkpoint(eventlog)
    await Checkpoints(pool, eventlog).keep(agent_id, checkpoint)
    assert await Checkpoints(pool, eventlog).latest(agent_id) == checkpoint
    # A later one replaces it.
    later = await a_checkpoint(eventlog)
    await Checkpoints(pool, eventlog).keep(agent_id, later)
    assert await Checkpoints(pool, eventlog).latest(agent_id) == later
    assert await Checkpoints(pool, eventlog).latest(new_id("agent")) is None


async def test_a_checkpoint_not_of_this_log_or_format_is_not_used(
    eventlog: EventLog, pool: asyncpg.Pool
) -> None:
    kept = {name: new_id("agent") for name in ("other log", "other format", "garbage")}
    for agent_id in kept.values():
        await Checkpoints(pool, eventlog).keep(agent_id, await a_checkpoint(eventlog))
    # (the log reset, or restored apart from Postgres: another event at its position)
    await pool.execute(
        "UPDATE snapshot_checkpoints SET event_id = 'evt-other' WHERE agent_id = $1",
        kept["other log"],
    )
    await pool.execute(
        "UPDATE snapshot_checkpoints SET format = $2 WHERE agent_id = $1",
        kept["other format"],
        checkpoint_codec.FORMAT + 1,
    )
    await pool.execute(
        "UPDATE snapshot_checkpoints SET folds = '\\x00ff'::bytea WHERE agent_id = $1",
        kept["garbage"],
    )
    for agent_id in kept.values():
        assert await Checkpoints(pool, eventlog).latest(agent_id) is None
