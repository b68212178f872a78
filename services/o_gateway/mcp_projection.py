"""The gateway's read model of the MCP server registry (projection "mcp_servers")."""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    McpServerCreated,
    McpServerDeleted,
    McpServerToolsSynced,
    McpServerUpdated,
)
from o_contracts.projection_names import MCP_SERVERS
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection, assignments

mcp_servers = Projection(
    name=MCP_SERVERS,
    filter_subject=subjects.MCP_SERVER_EVENTS,
    tables=["mcp_servers", "mcp_tools"],
)

# McpServerUpdated.changes key -> column.
COLUMNS = (
    "server_name",
    "server_type",
    "command",
    "args",
    "server_url",
    "auth_header",
    "encrypted_auth_token",
    "encrypted_custom_headers",
    "encrypted_env",
)


@mcp_servers.on(McpServerCreated)
async def server_created(conn: asyncpg.Connection, e: McpServerCreated, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO mcp_servers (id, server_name, server_type, command, args, server_url,"
        " auth_header, encrypted_auth_token, encrypted_custom_headers, encrypted_env,"
        " created_at, updated_at, last_seq)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$11,$12) ON CONFLICT (id) DO NOTHING",
        e.mcp_server_id,
        e.server_name,
        e.server_type,
        e.command,
        e.args,
        e.server_url,
        e.auth_header,
        e.encrypted_auth_token,
        e.encrypted_custom_headers,
        e.encrypted_env,
        rec.envelope.time,
        rec.seq,
    )


@mcp_servers.on(McpServerUpdated)
async def server_updated(conn: asyncpg.Connection, e: McpServerUpdated, rec: Recorded) -> None:
    args: list[object] = [e.mcp_server_id, rec.envelope.time, rec.seq]
    await conn.execute(
        f"UPDATE mcp_servers SET updated_at = $2, last_seq = $3"
        f"{assignments(e.changes, COLUMNS, args)} WHERE id = $1",
        *args,
    )


@mcp_servers.on(McpServerDeleted)
async def server_deleted(conn: asyncpg.Connection, e: McpServerDeleted, rec: Recorded) -> None:
    await conn.execute("DELETE FROM mcp_tools WHERE mcp_server_id = $1", e.mcp_server_id)
    await conn.execute("DELETE FROM mcp_servers WHERE id = $1", e.mcp_server_id)


@mcp_servers.on(McpServerToolsSynced)
async def tools_synced(conn: asyncpg.Connection, e: McpServerToolsSynced, rec: Recorded) -> None:
    await conn.execute(
        "UPDATE mcp_servers SET updated_at = $2, last_seq = $3 WHERE id = $1",
        e.mcp_server_id,
        rec.envelope.time,
        rec.seq,
    )
    await conn.execute("DELETE FROM mcp_tools WHERE mcp_server_id = $1", e.mcp_server_id)
    await conn.executemany(
        "INSERT INTO mcp_tools (id, mcp_server_id, position, name, description, json_schema,"
        " created_at) VALUES ($1,$2,$3,$4,$5,$6,$7) ON CONFLICT (id) DO NOTHING",
        [
            (t.tool_id, e.mcp_server_id, i, t.name, t.description, t.json_schema, rec.envelope.time)
            for i, t in enumerate(e.tools)
        ],
    )
