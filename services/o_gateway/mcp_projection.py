"""The gateway's read model of the MCP server registry (projection "mcp_servers"): the
servers, their tools, and the OAuth sign-ins to them (docs/mcp.md)."""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    McpOAuthAuthorized,
    McpOAuthCallbackReceived,
    McpOAuthFailed,
    McpOAuthStarted,
    McpOAuthTokensRefreshed,
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
    filter_subject=subjects.MCP_REGISTRY_EVENTS,
    tables=["mcp_servers", "mcp_tools", "mcp_oauth_sessions"],
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
    # Its sign-ins go with it, as Letta's do (those to its address no other server has).
    await conn.execute(
        "DELETE FROM mcp_oauth_sessions o USING mcp_servers s WHERE s.id = $1"
        " AND o.server_url = s.server_url AND NOT EXISTS (SELECT 1 FROM mcp_servers t"
        " WHERE t.id <> s.id AND t.server_url = s.server_url)",
        e.mcp_server_id,
    )
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


@mcp_servers.on(McpOAuthStarted)
async def oauth_started(conn: asyncpg.Connection, e: McpOAuthStarted, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO mcp_oauth_sessions (id, server_url, server_name, state_digest,"
        " redirect_uri, status, created_at, updated_at, last_seq)"
        " VALUES ($1,$2,$3,$4,$5,'pending',$6,$6,$7) ON CONFLICT (id) DO NOTHING",
        e.session_id,
        e.server_url,
        e.server_name,
        e.state_digest,
        e.redirect_uri,
        rec.envelope.time,
        rec.seq,
    )


async def _oauth_set(
    conn: asyncpg.Connection, session_id: str, rec: Recorded, sets: str, *args: object
) -> None:
    # (A sign-in deleted with its server stays deleted: UPDATE finds no row.)
    await conn.execute(
        f"UPDATE mcp_oauth_sessions SET updated_at = $2, last_seq = $3, {sets} WHERE id = $1",
        session_id,
        rec.envelope.time,
        rec.seq,
        *args,
    )


@mcp_servers.on(McpOAuthCallbackReceived)
async def oauth_called_back(
    conn: asyncpg.Connection, e: McpOAuthCallbackReceived, rec: Recorded
) -> None:
    status, error = ("failed", e.error) if e.error else ("called_back", None)
    await _oauth_set(conn, e.session_id, rec, "status = $4, error = $5", status, error)


@mcp_servers.on(McpOAuthAuthorized)
async def oauth_authorized(conn: asyncpg.Connection, e: McpOAuthAuthorized, rec: Recorded) -> None:
    await _oauth_set(
        conn,
        e.session_id,
        rec,
        "status = 'authorized', encrypted_tokens = $4, expires_at = $5, scope = $6,"
        " encrypted_client = $7, oauth_metadata = $8",
        e.encrypted_tokens,
        e.expires_at,
        e.scope,
        e.encrypted_client,
        e.oauth_metadata,
    )


@mcp_servers.on(McpOAuthTokensRefreshed)
async def oauth_refreshed(
    conn: asyncpg.Connection, e: McpOAuthTokensRefreshed, rec: Recorded
) -> None:
    await _oauth_set(
        conn,
        e.session_id,
        rec,
        "encrypted_tokens = $4, expires_at = $5, scope = $6",
        e.encrypted_tokens,
        e.expires_at,
        e.scope,
    )


@mcp_servers.on(McpOAuthFailed)
async def oauth_failed(conn: asyncpg.Connection, e: McpOAuthFailed, rec: Recorded) -> None:
    # (A sign-in that got its tokens stays authorized: a failure after is a late word.)
    await _oauth_set(
        conn,
        e.session_id,
        rec,
        "status = CASE WHEN status = 'authorized' THEN status ELSE 'failed' END, error = $4",
        e.reason,
    )
