"""MCP servers: `/v1/mcp-servers/` (create, list, get, update, delete; a server's tools,
refresh, run one; connect: its tools asked as a stream of events, mcp_probe.py).

Where the calls run (docs/mcp.md): the gateway asks sse and streamable_http servers
itself, one short session per request; stdio servers are programs users bring, run
confined by the tool sandbox, which the gateway asks over NATS.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import StreamingResponse

from o_contracts import subjects
from o_contracts.events import (
    McpServerDeleted,
    McpServerToolsSynced,
    McpServerUpdated,
)
from o_contracts.ids import new_id
from o_contracts.projection_names import MCP_SERVERS
from o_gateway import mcp_probe
from o_gateway.commands import append_decided
from o_gateway.mcp_registry import (
    McpServer,
    check_url,
    encrypt,
    encrypt_one,
    endpoint,
    relay,
    server_by_id,
    server_created,
    server_id_by_name,
)
from o_gateway.mcp_schemas import (
    CreateMcpServerBody,
    RunMcpToolBody,
    UpdateMcpServerBody,
    UpdateStdioConfig,
)
from o_gateway.mcp_sign_in import redirect_uri
from o_gateway.mcp_tools import offered, render_mcp_tool, tool_of, tools_of
from o_gateway.routes.paths import route
from o_gateway.state import GW, Gateway, checked_id
from o_gateway.streaming import streamed
from o_runtime import mcp_client

router = APIRouter()

# Letta lists a new server's tools while creating it, best effort: a server that does
# not answer soon still gets created (with no tools until a refresh).
SYNC_ON_CREATE_SECONDS = 5.0
# One call to a server: listing on refresh, or running a tool.
CALL_SECONDS = 30.0


async def append(gw: Gateway, server_id: str, event: Any, expected: int | None) -> int:
    subject = subjects.mcp_server_subject(server_id)
    seq = await append_decided(
        gw.eventlog, subject, server_id, event, expected, f"MCP server {server_id}"
    )
    await gw.visible(seq, MCP_SERVERS)
    return seq


async def check_name_free(gw: Gateway, name: str, server_id: str | None = None) -> None:
    other = await server_id_by_name(gw, name)
    if other is not None and other != server_id:
        raise HTTPException(409, f"an MCP server named '{name}' already exists")


async def sync_tools(gw: Gateway, server: McpServer, timeout: float) -> list[str]:
    """Ask the server for its tools and record the answer; the names, in its order."""
    listed = await mcp_client.list_tools(await endpoint(gw, server), timeout, relay(gw))
    tools = [offered(server.id, t) for t in listed]
    await append(
        gw,
        server.id,
        McpServerToolsSynced(mcp_server_id=server.id, tools=tools),
        expected=server.last_seq,
    )
    return [t.name for t in tools]


@route(router, "POST", "/v1/mcp-servers/")
async def create_mcp_server(body: CreateMcpServerBody, gw: GW) -> dict[str, Any]:
    return (await create(gw, body)).render()


async def create(gw: Gateway, body: CreateMcpServerBody) -> McpServer:
    config = body.config
    await check_name_free(gw, body.server_name)
    server_id = new_id("mcp_server")
    event = server_created(
        server_id,
        body.server_name,
        config.mcp_server_type,
        config,
        allow_private_urls=gw.settings.mcp_allow_private_urls,
    )
    await append(gw, server_id, event, expected=0)
    server = await server_by_id(gw, server_id)
    try:
        await sync_tools(gw, server, SYNC_ON_CREATE_SECONDS)
    except mcp_client.McpUnavailable:
        pass  # created all the same, as Letta does; a refresh says why
    else:
        server = await server_by_id(gw, server_id)
    return server


@route(router, "GET", "/v1/mcp-servers/connect/{mcp_server_id}")
async def connect_mcp_server(
    mcp_server_id: str, gw: GW, http_request: Request
) -> StreamingResponse:
    """A registered server asked for its tools, as a stream of events (mcp_probe.py), with
    the OAuth sign-in when it asks for one (mcp_sign_in.py); its tools are recorded by a
    refresh."""
    checked_id(mcp_server_id, "mcp_server")
    server = await server_by_id(gw, mcp_server_id)
    found = await endpoint(gw, server)
    redirect = redirect_uri(gw, http_request)
    return streamed(mcp_probe.connect_events(gw, server.server_name, found, redirect))


@route(router, "GET", "/v1/mcp-servers/")
async def list_mcp_servers(gw: GW) -> list[dict[str, Any]]:
    rows = await gw.pool.fetch("SELECT * FROM mcp_servers ORDER BY created_at, id")
    return [McpServer.from_row(dict(r)).render() for r in rows]


@route(router, "GET", "/v1/mcp-servers/{mcp_server_id}")
async def retrieve_mcp_server(mcp_server_id: str, gw: GW) -> dict[str, Any]:
    checked_id(mcp_server_id, "mcp_server")
    return (await server_by_id(gw, mcp_server_id)).render()


def config_changes(
    server: McpServer, body: UpdateMcpServerBody, allow_private: bool
) -> dict[str, Any]:
    config = body.config
    if config is None:
        return {}
    if config.mcp_server_type != server.server_type:
        raise HTTPException(
            400,
            f"MCP server {server.id} is a {server.server_type} server; its type cannot change "
            f"to {config.mcp_server_type} (create a new server)",
        )
    sent = config.model_dump(exclude_unset=True, exclude={"mcp_server_type"})
    given = {k: v for k, v in sent.items() if v is not None}
    if isinstance(config, UpdateStdioConfig):
        changes: dict[str, Any] = {k: given[k] for k in ("command", "args") if k in given}
        if "env" in given:
            changes["encrypted_env"] = encrypt(given["env"])
        return changes
    changes = {k: given[k] for k in ("server_url", "auth_header") if k in given}
    if "server_url" in changes:
        check_url(changes["server_url"], allow_private)
    if "auth_token" in given:
        changes["encrypted_auth_token"] = encrypt_one(given["auth_token"])
    if "custom_headers" in given:
        changes["encrypted_custom_headers"] = encrypt(given["custom_headers"])
    return changes


@route(router, "PATCH", "/v1/mcp-servers/{mcp_server_id}")
async def update_mcp_server(
    mcp_server_id: str, body: UpdateMcpServerBody, gw: GW
) -> dict[str, Any]:
    checked_id(mcp_server_id, "mcp_server")
    return (await update(gw, await server_by_id(gw, mcp_server_id), body)).render()


async def update(gw: Gateway, server: McpServer, body: UpdateMcpServerBody) -> McpServer:
    changes = config_changes(server, body, gw.settings.mcp_allow_private_urls)
    if body.server_name is not None and body.server_name != server.server_name:
        await check_name_free(gw, body.server_name, server.id)
        changes["server_name"] = body.server_name
    if changes:
        event = McpServerUpdated(mcp_server_id=server.id, changes=changes)
        await append(gw, server.id, event, expected=server.last_seq)
    return await server_by_id(gw, server.id)


@route(router, "DELETE", "/v1/mcp-servers/{mcp_server_id}", status_code=204)
async def delete_mcp_server(mcp_server_id: str, gw: GW) -> Response:
    checked_id(mcp_server_id, "mcp_server")
    await delete(gw, await server_by_id(gw, mcp_server_id))
    return Response(status_code=204)


async def delete(gw: Gateway, server: McpServer) -> None:
    await append(gw, server.id, McpServerDeleted(mcp_server_id=server.id), server.last_seq)


@route(router, "GET", "/v1/mcp-servers/{mcp_server_id}/tools")
async def list_mcp_server_tools(mcp_server_id: str, gw: GW) -> list[dict[str, Any]]:
    # What the server offered at its last sync (creation or refresh), as Letta lists
    # them: from the registry, without asking the server again.
    checked_id(mcp_server_id, "mcp_server")
    server = await server_by_id(gw, mcp_server_id)
    return [render_mcp_tool(r, server.server_name) for r in await tools_of(gw, server)]


@route(router, "GET", "/v1/mcp-servers/{mcp_server_id}/tools/{tool_id}")
async def retrieve_mcp_tool(mcp_server_id: str, tool_id: str, gw: GW) -> dict[str, Any]:
    checked_id(mcp_server_id, "mcp_server")
    checked_id(tool_id, "tool")
    server = await server_by_id(gw, mcp_server_id)
    return render_mcp_tool(await tool_of(gw, server, tool_id), server.server_name)


@route(router, "POST", "/v1/mcp-servers/{mcp_server_id}/tools/{tool_id}/run")
async def run_mcp_tool(
    mcp_server_id: str, tool_id: str, gw: GW, body: RunMcpToolBody | None = None
) -> dict[str, Any]:
    checked_id(mcp_server_id, "mcp_server")
    checked_id(tool_id, "tool")
    server = await server_by_id(gw, mcp_server_id)
    tool = await tool_of(gw, server, tool_id)
    args = body.args if body is not None else {}
    try:
        outcome = await mcp_client.call_tool(
            await endpoint(gw, server), tool["name"], args, CALL_SECONDS, relay(gw)
        )
        status, text = ("success" if outcome.ok else "error"), outcome.text
    except mcp_client.McpUnavailable as exc:
        # The server being down is the tool's failure, not the request's.
        status, text = "error", f"MCP server {server.server_name} could not be called: {exc}"
    return {
        "status": status,
        "func_return": text,
        "agent_state": None,
        "stdout": None,
        "stderr": None,
        "sandbox_config_fingerprint": None,
    }


@route(router, "PATCH", "/v1/mcp-servers/{mcp_server_id}/refresh")
async def refresh_mcp_server_tools(
    mcp_server_id: str, gw: GW, agent_id: str | None = None
) -> dict[str, list[str]]:
    checked_id(mcp_server_id, "mcp_server")
    return await refresh(gw, await server_by_id(gw, mcp_server_id))


async def refresh(gw: Gateway, server: McpServer) -> dict[str, list[str]]:
    """Ask the server again and record its answer: what was deleted, updated, added."""
    before = {r["name"]: r["json_schema"] for r in await tools_of(gw, server)}
    try:
        listed = await mcp_client.list_tools(await endpoint(gw, server), CALL_SECONDS, relay(gw))
    except mcp_client.McpUnavailable as exc:
        # Letta's answer when the server cannot be reached: 404 with its reason.
        raise HTTPException(
            404,
            {
                "code": "MCPServerUnavailable",
                "message": f"Could not connect to MCP server {server.server_name} to resync tools",
                "error": str(exc),
            },
        ) from exc
    tools = [offered(server.id, t) for t in listed]
    event = McpServerToolsSynced(mcp_server_id=server.id, tools=tools)
    await append(gw, server.id, event, expected=server.last_seq)
    after = {t.name: t.json_schema for t in tools}
    return {
        "deleted": [n for n in before if n not in after],
        "updated": [n for n in after if n in before and before[n] != after[n]],
        "added": [n for n in after if n not in before],
    }
