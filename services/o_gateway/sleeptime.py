"""Sleep-time companions (Letta's enable_sleeptime): made, kept in step and removed.

Turning the flag on gives the primary a companion agent (`<name>-sleeptime`, type
sleeptime_agent) that has the primary's blocks (the same blocks: an edit by either
shows to both at once) and a block of its own (memory_persona), and a group with
manager_type "sleeptime" naming the primary as its manager and the companion as
its agent. When the companion runs is the evolution service's decision (docs/sleeptime.md).

Every id here is derived from the primary's, so a retried request (or one that
died half-way) makes the same companion, block and group, never a second set.
"""

from __future__ import annotations

import logging
from typing import Any

from nats.aio.msg import Msg

from o_contracts import subjects
from o_contracts.base_tools import BASE_TOOLS, SLEEPTIME_RULES
from o_contracts.commands import CreateBlock
from o_contracts.envelope import Envelope, known_type
from o_contracts.events import AgentCreated, GroupCreated, GroupDeleted, SleeptimeTurnCounted
from o_contracts.ids import derived_id
from o_contracts.models import BlockSpec, ChatMessage, ToolRule
from o_contracts.projection_names import AGENTS, GROUPS, MEMORY, RUNS
from o_contracts.prompts import SLEEPTIME_PERSONA, SLEEPTIME_SYSTEM
from o_contracts.system_prompt import compile_system
from o_gateway import decisions
from o_gateway.commands import PRODUCER, memory_command
from o_gateway.group_reads import sleeptime_group
from o_gateway.state import Gateway
from o_runtime.eventlog import ConcurrencyConflict
from o_runtime.log_news import look_until

log = logging.getLogger(__name__)

# Letta's default: the companion runs on the first turn, then every fifth.
DEFAULT_FREQUENCY = 5
PERSONA_LABEL = "memory_persona"


def companion_id(primary_id: str) -> str:
    return derived_id("agent", primary_id, "sleeptime")


def group_id(primary_id: str) -> str:
    return derived_id("group", primary_id, "sleeptime")


async def _append_once(gw: Gateway, subject: str, event: Any, aggregate_id: str) -> int:
    """Append the first event of a new aggregate; if it exists already, its last position."""
    try:
        appended = await gw.eventlog.append(
            subject,
            Envelope.wrap(event, aggregate_id=aggregate_id, producer=PRODUCER),
            expected_last_seq=0,
        )
        return appended.seq
    except ConcurrencyConflict:
        return await gw.eventlog.last_seq(subject)


async def _delete_group(gw: Gateway, group_id: str) -> None:
    event = Envelope.wrap(GroupDeleted(group_id=group_id), aggregate_id=group_id, producer=PRODUCER)
    appended = await gw.eventlog.append(subjects.group_subject(group_id), event)
    await gw.visible(appended.seq, GROUPS)


async def enable(gw: Gateway, primary_id: str) -> None:
    """Make the primary's companion and group (nothing if it has them).

    Returns once they are visible (a projection waits only for events it reads).
    """
    if await sleeptime_group(gw.pool, primary_id) is not None:
        return
    primary = await gw.agent_row(primary_id)
    blocks = await gw.pool.fetch(
        'SELECT b.id, b.label, b.value, b."limit", b.description, b.read_only'
        " FROM agent_blocks ab JOIN blocks b ON b.id = ab.block_id WHERE ab.agent_id = $1"
        " ORDER BY ab.position",
        primary_id,
    )
    companion = companion_id(primary_id)
    persona = BlockSpec(
        label=PERSONA_LABEL, value=SLEEPTIME_PERSONA, limit=max(5000, len(SLEEPTIME_PERSONA))
    )
    persona_id = derived_id("block", companion, PERSONA_LABEL)
    reply = await memory_command(
        gw,
        CreateBlock(block_id=persona_id, spec=persona),
        persona_id,
        command_id=derived_id("cmd", persona_id, "create"),
    )
    shared = [dict(b) for b in blocks if b["label"] != PERSONA_LABEL]
    all_blocks = [*shared, persona.model_dump()]
    created = AgentCreated(
        agent_id=companion,
        name=f"{primary['name']}-sleeptime",
        system=SLEEPTIME_SYSTEM,
        agent_type="sleeptime_agent",
        llm_config=primary["llm_config"],
        embedding_config=primary["embedding_config"],
        tools=list(BASE_TOOLS["sleeptime_agent"]),
        tool_rules=[ToolRule.model_validate(r) for r in SLEEPTIME_RULES],
        block_ids=[b["id"] for b in shared] + [persona_id],
        timezone=primary["timezone"],
        system_message=ChatMessage(
            id=derived_id("message", companion, "system"),
            role="system",
            content=compile_system(SLEEPTIME_SYSTEM, companion, all_blocks, 0),
        ),
    )
    seq = await _append_once(gw, subjects.agent_subject(companion), created, companion)
    await gw.visible(reply.seq, MEMORY)
    await gw.visible(seq, AGENTS, MEMORY, RUNS)
    group = GroupCreated(
        group_id=group_id(primary_id),
        manager_type="sleeptime",
        agent_ids=[companion],
        manager_agent_id=primary_id,
        sleeptime_agent_frequency=DEFAULT_FREQUENCY,
        managed=True,
    )
    subject = subjects.group_subject(group.group_id)
    await gw.visible(await _append_once(gw, subject, group, group.group_id), GROUPS)


async def disable(gw: Gateway, primary_id: str) -> None:
    """Remove the primary's sleep-time group and its companions (visible on return)."""
    group = await sleeptime_group(gw.pool, primary_id)
    if group is None:
        return
    for agent_id in group["agent_ids"]:
        try:
            seq = await decisions.change_agent(gw, decisions.DeleteAgent(agent_id))
        except decisions.Refused:
            continue  # deleted already
        await gw.visible(seq, AGENTS, MEMORY)
    await _delete_group(gw, group["id"])


async def companions_of(gw: Gateway, agent_id: str) -> list[str]:
    """The companions of the sleep-time group `agent_id` manages (none if it manages none)."""
    group = await sleeptime_group(gw.pool, agent_id)
    return list(group["agent_ids"]) if group is not None else []


async def leave_group(gw: Gateway, agent_id: str) -> None:
    """A companion being deleted takes its sleep-time group along, and its primary keeps
    its own memory again (Letta's deletion of a sleep-time agent)."""
    group = await gw.pool.fetchrow(
        "SELECT id, manager_agent_id FROM groups WHERE manager_type = 'sleeptime'"
        " AND $1 = ANY(agent_ids) LIMIT 1",
        agent_id,
    )
    if group is None:
        return
    await _delete_group(gw, group["id"])
    if group["manager_agent_id"]:
        off = decisions.UpdateAgent(
            group["manager_agent_id"], decisions.AgentChanges(enable_sleeptime=False)
        )
        try:
            await gw.visible(await decisions.change_agent(gw, off), AGENTS)
        except decisions.Refused:
            pass  # the primary is gone


async def attach_to_companions(gw: Gateway, agent_id: str, block_id: str, label: str) -> int:
    """A block attached to a primary is attached to its companions too (they share memory)."""
    seq = 0
    for companion in await companions_of(gw, agent_id):
        try:
            seq = max(
                seq,
                await decisions.change_agent(gw, decisions.AttachBlock(companion, block_id, label)),
            )
        except decisions.Refused:
            pass  # the companion is gone, or has a block of that label of its own
    return seq


async def companion_runs(gw: Gateway, agent_id: str, run_id: str, timeout: float) -> list[str]:
    """The companion runs the manager's run `run_id` started (Letta's usage.run_ids).

    The evolution service counts the turn right after the run ends; a reply waits
    for that decision at most `timeout` (O_SLEEPTIME_TURN_WAIT), so a slow or
    stopped evolution service never holds a reply back longer. The runs exist
    (and list) once the decision is visible.
    """
    subject = subjects.agent_subject(agent_id)

    def heard(msg: Msg) -> bool:
        return known_type(msg.data) == SleeptimeTurnCounted.type_name()

    async def look() -> list[str] | None:
        last = await gw.eventlog.last_seq(subject)
        async with gw.reads.at(last, RUNS) as conn:
            started = await conn.fetchval(
                "SELECT started FROM sleeptime_turns WHERE run_id = $1", run_id
            )
        return None if started is None else [r["run_id"] for r in started]

    runs = await look_until(gw.eventlog.nc, subject, heard, look, timeout)
    if runs is None:
        log.warning("no sleep-time decision on run %s within %.1fs", run_id, timeout)
        return []
    return runs
