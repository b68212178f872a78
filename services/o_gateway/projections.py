"""The gateway's read model of the agent registry (projection "agents")."""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    AgentCreated,
    AgentDeleted,
    AgentUpdated,
    FolderAttached,
    FolderDetached,
    ToolAttached,
    ToolDetached,
)
from o_contracts.projection_names import AGENTS
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection, assignments

agents = Projection(name=AGENTS, filter_subject=subjects.AGENT_EVENTS, tables=["agents"])

# AgentUpdated.changes keys that are our columns; anything else in changes is
# not ours (block_ids belong to the memory projection).
_COLUMNS = (
    "name",
    "system",
    "agent_type",
    "llm_config",
    "embedding_config",
    "tools",
    "tool_rules",
    "tags",
    "metadata",
    "description",
    "timezone",
    "encrypted_secrets",
    "tool_ids",
    "enable_sleeptime",
    "concurrency",
)


@agents.on(AgentCreated)
async def agent_created(conn: asyncpg.Connection, e: AgentCreated, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO agents (id, name, system, agent_type, llm_config, embedding_config, tools,"
        " tool_rules, tags, metadata, description, timezone, created_at, updated_at, last_seq,"
        " tool_ids, encrypted_secrets, enable_sleeptime, concurrency)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$13,$14,$15,$16,$17,$18)"
        " ON CONFLICT (id) DO NOTHING",
        e.agent_id,
        e.name,
        e.system,
        e.agent_type,
        e.llm_config,
        e.embedding_config,
        e.tools,
        [r.model_dump(mode="json") for r in e.tool_rules],
        e.tags,
        e.metadata,
        e.description,
        e.timezone,
        rec.envelope.time,
        rec.seq,
        e.tool_ids,
        e.encrypted_secrets,
        e.enable_sleeptime,
        e.concurrency,
    )


@agents.on(AgentUpdated)
async def agent_updated(conn: asyncpg.Connection, e: AgentUpdated, rec: Recorded) -> None:
    args: list[object] = [e.agent_id, rec.envelope.time, rec.seq]
    await conn.execute(
        f"UPDATE agents SET updated_at = $2, last_seq = $3{assignments(e.changes, _COLUMNS, args)}"
        " WHERE id = $1",
        *args,
    )


@agents.on(AgentDeleted)
async def agent_deleted(conn: asyncpg.Connection, e: AgentDeleted, rec: Recorded) -> None:
    await conn.execute("DELETE FROM agents WHERE id = $1", e.agent_id)


@agents.on(ToolAttached)
async def tool_attached(conn: asyncpg.Connection, e: ToolAttached, rec: Recorded) -> None:
    rules = (
        [{"type": "requires_approval", "tool_name": e.tool_name}]
        if e.requires_approval and e.tool_name
        else []
    )
    await conn.execute(
        "UPDATE agents SET tool_ids = array_append(tool_ids, $2), updated_at = $3, last_seq = $4,"
        " tool_rules = tool_rules || $5::jsonb WHERE id = $1 AND NOT ($2 = ANY(tool_ids))",
        e.agent_id,
        e.tool_id,
        rec.envelope.time,
        rec.seq,
        rules,
    )


@agents.on(ToolDetached)
async def tool_detached(conn: asyncpg.Connection, e: ToolDetached, rec: Recorded) -> None:
    await conn.execute(
        "UPDATE agents SET tool_ids = array_remove(tool_ids, $2), updated_at = $3, last_seq = $4"
        " WHERE id = $1",
        e.agent_id,
        e.tool_id,
        rec.envelope.time,
        rec.seq,
    )


async def _folder_tools(
    conn: asyncpg.Connection, agent_id: str, tools: list[str] | None, rec: Recorded
) -> None:
    """A folder's attachment itself is the memory service's (projection "folders"); the
    agent's built-in tools change with it when it gains or loses the files tools."""
    if tools is not None:
        await conn.execute(
            "UPDATE agents SET tools = $2, updated_at = $3, last_seq = $4 WHERE id = $1",
            agent_id,
            tools,
            rec.envelope.time,
            rec.seq,
        )


@agents.on(FolderAttached)
async def folder_attached(conn: asyncpg.Connection, e: FolderAttached, rec: Recorded) -> None:
    await _folder_tools(conn, e.agent_id, e.tools, rec)


@agents.on(FolderDetached)
async def folder_detached(conn: asyncpg.Connection, e: FolderDetached, rec: Recorded) -> None:
    await _folder_tools(conn, e.agent_id, e.tools, rec)
