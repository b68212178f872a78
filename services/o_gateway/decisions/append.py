"""Agent decisions made and appended: read the state, decide (decide.py), append.

A change to an existing agent reads the agent on a connection checked to be at
the log position it decides on (`gw.reads.at`, o_runtime/reads.py) and
appends with that position as the subject's expected sequence
(`eventlog.append_decided`): a change that raced another is decided again on
the new state, never appended on a stale one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from o_contracts import subjects
from o_contracts.commands import CreateBlock
from o_contracts.envelope import Envelope
from o_contracts.projection_names import AGENTS, MEMORY
from o_gateway.commands import PRODUCER, memory_command
from o_gateway.decisions import decide
from o_gateway.decisions.agent import read_agent
from o_gateway.decisions.commands import AgentChange, CreateAgent
from o_gateway.state import Gateway
from o_runtime.eventlog import ConcurrencyConflict


async def create_agent(gw: Gateway, command: CreateAgent) -> int:
    """Create the agent (and its new blocks); the log position its reads wait for."""
    # Decided first (from the request alone): a refused request creates nothing.
    event = decide.create_agent(command)
    # Then the blocks: the agent's creation event only names blocks that exist.
    # (With an Idempotency-Key, a retry names the same blocks and commands.)
    replies = await asyncio.gather(
        *(
            memory_command(
                gw,
                CreateBlock(block_id=b.block_id, spec=b.spec),
                b.block_id,
                command_id=b.command_id,
            )
            for b in command.new_blocks
        )
    )
    subject = subjects.agent_subject(command.agent_id)
    try:
        appended = await gw.eventlog.append(
            subject,
            Envelope.wrap(event, aggregate_id=command.agent_id, producer=PRODUCER),
            expected_last_seq=0,
        )
        seq = appended.seq
    except ConcurrencyConflict:
        if command.idempotency_key is None:
            raise
        # Created by the first try of this request: answered as it was.
        seq = await gw.eventlog.last_seq(subject)
    return max([seq, *(r.seq or 0 for r in replies)])


async def change_agent(gw: Gateway, command: AgentChange) -> int:
    """Decide `command` on the agent's current state and append the event.

    Returns the event's log position, 0 when the decision changed nothing.
    """

    async def decided(last: int) -> Envelope[Any] | None:
        async with gw.reads.at(last, AGENTS, MEMORY) as conn:
            agent = await read_agent(conn, command)
        event = decide.change_agent(command, agent)
        if event is None:
            return None
        return Envelope.wrap(event, aggregate_id=command.agent_id, producer=PRODUCER)

    subject = subjects.agent_subject(command.agent_id)
    appended = await gw.eventlog.append_decided(subject, decided)
    return appended.seq if appended else 0
