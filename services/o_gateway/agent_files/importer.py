"""An import plan written through O's usual commands and events, each exactly once.

In dependency order: the images the history shows (object store), the MCP
servers the file registers (McpServerCreated, McpServerToolsSynced), the folders
(FolderCreated, then a FileUploaded per file, its text put in the file store
first: the memory service processes it as any upload), the tools (ToolCreated /
ToolUpdated on their subjects), the blocks (CreateBlock to the memory service),
each agent (its AgentCreated, as POST /v1/agents/ appends it) followed by its
history (MessagesImported parts) and its folders (FolderAttached), each
expecting the agent subject's previous position, the groups, and the sleep-time
companions a file asks for without bringing them; last, the attached folders'
processed files are opened for the agents, as an attach does. Every id derives
from the import's, so a retried import (same Idempotency-Key) finds what the
first try wrote and writes only what is missing; the answer comes once the read
models show it all.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import HTTPException

from o_contracts import subjects
from o_contracts.commands import CreateBlock
from o_contracts.envelope import Envelope
from o_contracts.events import FolderAttached, MessagesImported
from o_contracts.ids import derived_id
from o_contracts.projection_names import AGENTS, FOLDERS, GROUPS, MCP_SERVERS, MEMORY, RUNS, TOOLS
from o_gateway import decisions, sleeptime
from o_gateway.agent_files.folders_plan import NewFolder, folder_id_of
from o_gateway.agent_files.mcp_plan import NewMcpServer, mcp_server_id_of
from o_gateway.agent_files.plan import AgentWrite, ImportPlan, Registry
from o_gateway.agent_files.schema import AgentFile
from o_gateway.commands import PRODUCER, memory_command
from o_gateway.mcp_tools import all_mcp_rows
from o_gateway.routes.agent_folders import open_folder_files
from o_gateway.state import Gateway
from o_runtime.eventlog import ConcurrencyConflict
from o_runtime.file_store import file_store


async def registry_for(gw: Gateway, file: AgentFile, import_id: str) -> Registry:
    """What of O a file's entities may meet: its tools by name, the MCP servers and the
    tools they offer, folders' names (leaving out what this import's first try made)."""
    names = sorted({t.name for t in file.tools} | {n for a in file.agents for n in a.tools or []})
    # (A tool this import's first try created is not one it met: a retry would override it.)
    own_tools = [derived_id("tool", import_id, t.id) for t in file.tools]
    rows = await gw.pool.fetch(
        "SELECT DISTINCT ON (name) * FROM tools WHERE name = ANY($1) AND NOT id = ANY($2)"
        " ORDER BY name, created_at, id",
        names,
        own_tools,
    )
    own_servers = [mcp_server_id_of(import_id, s.id) for s in file.mcp_servers]
    mcp = {
        (r["server_name"], r["name"]): r
        for r in await all_mcp_rows(gw)
        if r["mcp_server_id"] not in own_servers
    }
    servers = await gw.pool.fetch(
        "SELECT * FROM mcp_servers WHERE server_name = ANY($1) AND NOT id = ANY($2)",
        [s.server_name for s in file.mcp_servers],
        own_servers,
    )
    folders = await gw.pool.fetch(
        "SELECT name FROM folders WHERE name = ANY($1) AND NOT id = ANY($2)",
        [s.name for s in file.sources],
        [folder_id_of(import_id, s.id) for s in file.sources],
    )
    return Registry(
        {r["name"]: dict(r) for r in rows},
        mcp,
        mcp_servers={r["server_name"]: dict(r) for r in servers},
        folder_names={r["name"] for r in folders},
        allow_private_mcp_urls=gw.settings.mcp_allow_private_urls,
    )


async def write(gw: Gateway, plan: ImportPlan) -> None:
    """Write the plan; returns once every read model shows it."""
    if plan.images:
        images = await gw.eventlog.images()
        for data in plan.images.values():
            await images.put(data)
    # (Each projection is waited for at the last event it reads.)
    servers = [await _mcp_server(gw, server) for server in plan.mcp_servers]
    folders = [await _folder(gw, folder) for folder in plan.folders]
    # An agent's MCP tools are rendered from the servers' rows.
    await gw.visible(max(servers, default=0), MCP_SERVERS)
    tools = [0]
    for tool in plan.tools:
        subject = subjects.tool_subject(tool.tool_id)
        if tool.once is not None:
            tools.append(
                await _append_once(gw, subject, tool.event, tool.tool_id, tool.once, tool.expected)
            )
        else:
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
    attached: list[tuple[str, str]] = []
    for agent in plan.agents:
        # (create_agent's answer may be its inline blocks' position; _after_creation's is
        # the agent subject's last, which the agents and runs projections read.)
        blocks.append(await decisions.create_agent(gw, agent.command))
        agents.append(await _after_creation(gw, agent))
        attached += [(agent.command.agent_id, f.folder_id) for f in agent.folders]
    groups = [0]
    for group in plan.groups:
        subject = subjects.group_subject(group.group_id)
        groups.append(await _append_new(gw, subject, group, group.group_id, 0))
    await gw.visible(max(tools), TOOLS)
    await gw.visible(max([*blocks, *agents]), MEMORY)
    await gw.visible(max(agents), AGENTS, RUNS)
    await gw.visible(max(groups), GROUPS)
    await gw.visible(max([*folders, *(agents if attached else [0])]), FOLDERS)
    for agent_id, folder_id in attached:
        # As an attach does: the folder's processed files open for the agent (those
        # processed later open as they complete).
        await open_folder_files(gw, agent_id, folder_id)
    for agent_id in plan.sleeptime:
        await sleeptime.enable(gw, agent_id)


async def _mcp_server(gw: Gateway, server: NewMcpServer) -> int:
    subject = subjects.mcp_server_subject(server.server_id)
    seq = await _append_new(gw, subject, server.created, server.server_id, 0)
    if server.synced is not None:
        seq = await _append_new(gw, subject, server.synced, server.server_id, seq)
    return seq


async def _folder(gw: Gateway, folder: NewFolder) -> int:
    """The folder, then its files, each text stored before the event that names it."""
    folder_id = folder.event.folder_id
    subject = subjects.folder_subject(folder_id)
    seq = await _append_new(gw, subject, folder.event, folder_id, 0)
    store = await file_store(gw.eventlog) if folder.files else None
    for new in folder.files:
        assert store is not None
        await store.put(new.data)
        seq = await _append_new(gw, subject, new.event, folder_id, seq)
    return seq


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


async def _append_once(
    gw: Gateway, subject: str, event: Any, aggregate_id: str, event_id: str, expected: int
) -> int:
    """Append `event` as `event_id`, expecting the subject at `expected`, unless the subject
    holds it (this import's first try wrote it): its position either way."""
    for recorded in await gw.eventlog.read_subject(subject):
        if recorded.envelope.id == event_id:
            return recorded.seq
    envelope = Envelope.wrap(event, aggregate_id=aggregate_id, producer=PRODUCER, id=event_id)
    try:
        return (await gw.eventlog.append(subject, envelope, expected_last_seq=expected)).seq
    except ConcurrencyConflict:
        raise HTTPException(409, f"{subject} changed while importing; try again") from None


async def _after_creation(gw: Gateway, agent: AgentWrite) -> int:
    """Append what follows the agent's creation and is not in the log yet: its history
    parts, then its folders, each expecting the subject's previous position (nothing can
    slip in between). Returns the last position."""
    agent_id = agent.command.agent_id
    subject = subjects.agent_subject(agent_id)
    recorded: dict[str, int] = {}
    last = await gw.eventlog.last_seq(subject)
    if agent.command.idempotency_key is not None and (agent.parts or agent.folders):
        # A retry: the first try may have written some of them.
        recorded = {r.envelope.id: r.seq for r in await gw.eventlog.read_subject(subject)}
    for part, messages in enumerate(agent.parts):
        event_id = derived_id("evt", agent_id, "import", str(part))
        if event_id in recorded:
            last = recorded[event_id]
            continue
        event = MessagesImported(agent_id=agent_id, part=part, messages=messages)
        last = await _append_after(gw, agent_id, event, event_id, last)
    for attached in agent.folders:
        event_id = derived_id("evt", agent_id, "import", "folder", attached.folder_id)
        if event_id in recorded:
            last = recorded[event_id]
            continue
        last = await _append_after(gw, agent_id, attached, event_id, last)
    return last


async def _append_after(
    gw: Gateway,
    agent_id: str,
    event: MessagesImported | FolderAttached,
    event_id: str,
    last: int,
) -> int:
    subject = subjects.agent_subject(agent_id)
    envelope = Envelope.wrap(event, aggregate_id=agent_id, producer=PRODUCER, id=event_id)
    try:
        return (await gw.eventlog.append(subject, envelope, expected_last_seq=last)).seq
    except ConcurrencyConflict:
        # Someone wrote to the new agent mid-import (a message sent to an id the
        # client could not know yet): its history would land after that.
        raise HTTPException(
            409, f"agent {agent_id} changed while its history was imported; try again"
        ) from None
