"""An import plan written through O's usual commands and events, each exactly once.

In dependency order: the images the history shows (object store), the tools
(ToolCreated / ToolUpdated on their subjects), the blocks (CreateBlock to the
memory service), each agent (its AgentCreated, as POST /v1/agents/ appends it)
followed by its history (MessagesImported parts, each expecting the agent
subject's previous position), the groups, and the sleep-time companions a file
asks for without bringing them. Every id derives from the import's, so a
retried import (same Idempotency-Key) finds what the first try wrote and
writes only what is missing; the answer comes once the read models show it all.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import HTTPException

from o_contracts import subjects
from o_contracts.commands import CreateBlock
from o_contracts.envelope import Envelope
from o_contracts.events import ImportedMessage, MessagesImported
from o_contracts.ids import derived_id
from o_contracts.projection_names import AGENTS, GROUPS, MEMORY, RUNS, TOOLS
from o_gateway import decisions, sleeptime
from o_gateway.agent_files.plan import AgentWrite, ImportPlan, Registry
from o_gateway.agent_files.schema import AgentFile
from o_gateway.commands import PRODUCER, memory_command
from o_gateway.mcp_tools import all_mcp_rows
from o_gateway.state import Gateway
from o_runtime.eventlog import ConcurrencyConflict


async def registry_for(gw: Gateway, file: AgentFile) -> Registry:
    """O's tools a file's tools may be (by name), and the MCP tools registered servers offer."""
    names = sorted({t.name for t in file.tools} | {n for a in file.agents for n in a.tools or []})
    rows = await gw.pool.fetch(
        "SELECT DISTINCT ON (name) * FROM tools WHERE name = ANY($1) ORDER BY name, created_at, id",
        names,
    )
    mcp = {(r["server_name"], r["name"]): r for r in await all_mcp_rows(gw)}
    return Registry({r["name"]: dict(r) for r in rows}, mcp)


async def write(gw: Gateway, plan: ImportPlan) -> None:
    """Write the plan; returns once every read model shows it."""
    if plan.images:
        images = await gw.eventlog.images()
        for data in plan.images.values():
            await images.put(data)
    # (Each projection is waited for at the last event it reads.)
    tools = [0]
    for tool in plan.tools:
        subject = subjects.tool_subject(tool.tool_id)
        tools.append(await _append_new(gw, subject, tool.event, tool.tool_id, tool.expected))
    replies = await asyncio.gather(
        *(
            memory_command(
                gw,
                CreateBlock(block_id=b.block_id, spec=b.spec),
                b.block_id,
                command_id=b.command_id,
            )
            for b in plan.blocks
        )
    )
    blocks = [r.seq or 0 for r in replies]
    agents = [0]
    for agent in plan.agents:
        # (create_agent's answer may be its inline blocks' position; _history's is the
        # agent subject's last, which the agents and runs projections read.)
        blocks.append(await decisions.create_agent(gw, agent.command))
        agents.append(await _history(gw, agent))
    groups = [0]
    for group in plan.groups:
        subject = subjects.group_subject(group.group_id)
        groups.append(await _append_new(gw, subject, group, group.group_id, 0))
    await gw.visible(max(tools), TOOLS)
    await gw.visible(max([*blocks, *agents]), MEMORY)
    await gw.visible(max(agents), AGENTS, RUNS)
    await gw.visible(max(groups), GROUPS)
    for agent_id in plan.sleeptime:
        await sleeptime.enable(gw, agent_id)


async def _append_new(
    gw: Gateway, subject: str, event: Any, aggregate_id: str, expected: int
) -> int:
    """Append `event` expecting the subject at `expected`; if another write got there
    first, it was this import's first try (a new aggregate's id is the import's) or a
    concurrent change (409)."""
    envelope = Envelope.wrap(
        event,
        aggregate_id=aggregate_id,
        producer=PRODUCER,
        id=derived_id("evt", subject, str(expected), type(event).__name__),
    )
    try:
        return (await gw.eventlog.append(subject, envelope, expected_last_seq=expected)).seq
    except ConcurrencyConflict:
        for recorded in await gw.eventlog.read_subject(subject):
            if recorded.envelope.id == envelope.id:
                return recorded.seq
        raise HTTPException(409, f"{subject} changed while importing; try again") from None


async def _history(gw: Gateway, agent: AgentWrite) -> int:
    """Append the agent's history parts that are not in the log yet; the last position."""
    agent_id = agent.command.agent_id
    subject = subjects.agent_subject(agent_id)
    done: dict[int, int] = {}
    last = await gw.eventlog.last_seq(subject)
    if agent.command.idempotency_key is not None and agent.parts:
        # A retry: the first try may have written some parts.
        for recorded in await gw.eventlog.read_subject(subject):
            if isinstance(recorded.envelope.data, MessagesImported):
                done[recorded.envelope.data.part] = recorded.seq
    for part, messages in enumerate(agent.parts):
        if part in done:
            last = done[part]
            continue
        last = await _append_part(gw, agent_id, part, messages, last)
    return last


async def _append_part(
    gw: Gateway, agent_id: str, part: int, messages: list[ImportedMessage], last: int
) -> int:
    subject = subjects.agent_subject(agent_id)
    envelope = Envelope.wrap(
        MessagesImported(agent_id=agent_id, part=part, messages=messages),
        aggregate_id=agent_id,
        producer=PRODUCER,
        id=derived_id("evt", agent_id, "import", str(part)),
    )
    try:
        return (await gw.eventlog.append(subject, envelope, expected_last_seq=last)).seq
    except ConcurrencyConflict:
        # Someone wrote to the new agent mid-import (a message sent to an id the
        # client could not know yet): its history would land after that.
        raise HTTPException(
            409, f"agent {agent_id} changed while its history was imported; try again"
        ) from None
