"""Letta's older MCP routes, under `/v1/tools/mcp/servers`, which older clients call: servers
by name, configs in Letta's `StdioServerConfig`/`SSEServerConfig` shape (`type`, not
`mcp_server_type`). They act on the same registry as `/v1/mcp-servers/`; `test` and
`connect` ask a server that is not registered (mcp_probe.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from o_gateway import mcp_probe
from o_gateway.mcp_registry import (
    McpServer,
    endpoint,
    relay,
    server_by_id,
    server_id_by_name,
)
from o_gateway.mcp_schemas import CreateMcpServerBody, RunMcpToolBody, UpdateMcpServerBody
from o_gateway.mcp_sign_in import CALLBACK_PATH, called_back, redirect_uri, render_offered
from o_gateway.mcp_tools import render_mcp_tool, tools_of
from o_gateway.routes import mcp_servers as current
from o_gateway.routes.paths import route
from o_gateway.schemas import Body
from o_gateway.state import GW, Gateway
from o_gateway.streaming import streamed
from o_runtime import mcp_client

router = APIRouter()
PREFIX = "/v1/tools/mcp/servers"


class LegacyConfigBody(Body):
    """Any of Letta's three server configs; which one is told by `type` (or, as Letta's
    union resolves it, `command` for stdio, else sse)."""

    model_config = {"extra": "allow"}
    server_name: str
    type: str | None = None


def render_config(server: McpServer) -> dict[str, Any]:
    shown = server.render()
    shown.pop("id")
    return {"type": shown.pop("mcp_server_type"), **shown}


async def by_name(gw: Gateway, name: str) -> McpServer:
    found = await server_id_by_name(gw, name)
    if found is None:
        raise HTTPException(404, f"MCP server '{name}' not found")
    return await server_by_id(gw, found)


async def all_configs(gw: Gateway) -> list[McpServer]:
    rows = await gw.pool.fetch("SELECT * FROM mcp_servers ORDER BY created_at, id")
    return [McpServer.from_row(dict(r)) for r in rows]


@route(router, "GET", PREFIX)
async def list_mcp_servers_by_name(gw: GW) -> dict[str, dict[str, Any]]:
    return {s.server_name: render_config(s) for s in await all_configs(gw)}


def as_current(body: LegacyConfigBody) -> CreateMcpServerBody:
    """The same server in `/v1/mcp-servers/`'s shape (422 for what that would refuse)."""
    fields = body.model_dump(exclude={"server_name", "type"})
    kind = body.type or ("stdio" if "command" in fields else "sse")
    try:
        return CreateMcpServerBody.model_validate(
            {"server_name": body.server_name, "config": {**fields, "mcp_server_type": kind}}
        )
    except ValidationError as exc:
        raise HTTPException(422, exc.errors(include_url=False, include_context=False)) from exc


@route(router, "PUT", PREFIX)
async def add_mcp_server(body: LegacyConfigBody, gw: GW) -> list[dict[str, Any]]:
    await current.create(gw, as_current(body))
    return [render_config(s) for s in await all_configs(gw)]


@route(router, "POST", PREFIX + "/test")
async def test_mcp_server(body: LegacyConfigBody, gw: GW) -> dict[str, Any]:
    """A server's tools, asked without registering it (mcp_probe.py); 502 with the reason
    when it cannot be asked, as Letta answers."""
    request = as_current(body)
    found = await mcp_probe.endpoint_of(gw, request.config)
    try:
        tools = await mcp_probe.tools_offered(gw, found)
    except mcp_client.McpUnavailable as exc:
        reason = f"MCP server '{body.server_name}' could not be reached: {exc}"
        raise HTTPException(502, reason) from exc
    return {"status": "success", "tools": [render_offered(t) for t in tools]}


@route(router, "POST", PREFIX + "/connect")
async def connect_mcp_server(
    body: LegacyConfigBody, gw: GW, http_request: Request
) -> StreamingResponse:
    """The same as a stream of events (mcp_probe.connect_events), with the OAuth sign-in
    when the server asks for it (mcp_sign_in.py); a config that creating the server would
    refuse is refused here before the stream starts."""
    request = as_current(body)
    found = await mcp_probe.endpoint_of(gw, request.config)
    redirect = redirect_uri(gw, http_request)
    return streamed(mcp_probe.connect_events(gw, body.server_name, found, redirect))


@route(router, "GET", CALLBACK_PATH)
async def mcp_oauth_callback(
    gw: GW,
    code: str | None = None,
    state: str | None = None,
    error: str | None = None,
    error_description: str | None = None,
    iss: str | None = None,
) -> dict[str, Any]:
    """Where an authorization server sends the user's browser back after an MCP server's
    OAuth sign-in (mcp_sign_in.py). Open without the API key: the browser has none; the
    state, a secret of the sign-in, is what admits it. Always 200, as Letta answers."""
    return await called_back(gw, code, state, error, error_description, iss)


class LegacyUpdateBody(Body):
    """Letta's Update*MCPServer: the fields of one kind, `mcp_server_type` optional here."""

    model_config = {"extra": "allow"}
    mcp_server_type: str | None = None


@route(router, "PATCH", PREFIX + "/{mcp_server_name}")
async def update_mcp_server_by_name(
    mcp_server_name: str, body: LegacyUpdateBody, gw: GW
) -> dict[str, Any]:
    server = await by_name(gw, mcp_server_name)
    fields = body.model_dump(exclude={"mcp_server_type"}, exclude_unset=True)
    kind = body.mcp_server_type or server.server_type
    try:
        request = UpdateMcpServerBody.model_validate(
            {"config": {**fields, "mcp_server_type": kind}}
        )
    except ValidationError as exc:
        raise HTTPException(422, exc.errors(include_url=False, include_context=False)) from exc
    return render_config(await current.update(gw, server, request))


@route(router, "DELETE", PREFIX + "/{mcp_server_name}")
async def delete_mcp_server_by_name(mcp_server_name: str, gw: GW) -> list[dict[str, Any]]:
    server = await by_name(gw, mcp_server_name)
    await current.delete(gw, server)
    return [render_config(s) for s in await all_configs(gw)]


@route(router, "GET", PREFIX + "/{mcp_server_name}/tools")
async def list_mcp_tools_by_server(mcp_server_name: str, gw: GW) -> list[dict[str, Any]]:
    # Letta asks the server here, not its registry; an unreachable one is a 502.
    server = await by_name(gw, mcp_server_name)
    try:
        listed = await mcp_client.list_tools(
            await endpoint(gw, server), current.CALL_SECONDS, relay(gw)
        )
    except mcp_client.McpUnavailable as exc:
        reason = f"MCP server '{mcp_server_name}' could not be reached: {exc}"
        raise HTTPException(502, reason) from exc
    return [
        {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
        for t in listed
    ]


@route(router, "POST", PREFIX + "/{mcp_server_name}/resync")
async def resync_mcp_server_tools(mcp_server_name: str, gw: GW) -> dict[str, list[str]]:
    return await current.refresh(gw, await by_name(gw, mcp_server_name))


@route(router, "POST", PREFIX + "/{mcp_server_name}/tools/{tool_name}/execute")
async def execute_mcp_tool(
    mcp_server_name: str, tool_name: str, gw: GW, body: RunMcpToolBody | None = None
) -> dict[str, Any]:
    server = await by_name(gw, mcp_server_name)
    args = body.args if body is not None else {}
    try:
        outcome = await mcp_client.call_tool(
            await endpoint(gw, server), tool_name, args, current.CALL_SECONDS, relay(gw)
        )
    except mcp_client.McpUnavailable as exc:
        reason = f"MCP server '{mcp_server_name}' could not be called: {exc}"
        raise HTTPException(502, reason) from exc
    return {"result": outcome.text, "success": outcome.ok}


@route(router, "POST", PREFIX + "/{mcp_server_name}/{mcp_tool_name}")
async def add_mcp_tool(mcp_server_name: str, mcp_tool_name: str, gw: GW) -> dict[str, Any]:
    """Letta registers one tool here; O records the server's whole answer (a refresh) and
    gives that tool, under the id agents attach it by."""
    server = await by_name(gw, mcp_server_name)
    await current.refresh(gw, server)
    offered = {r["name"]: r for r in await tools_of(gw, server)}
    if mcp_tool_name not in offered:
        raise HTTPException(
            400,
            f"Tool {mcp_tool_name} not found in MCP server {mcp_server_name} - available "
            f"tools: {', '.join(offered)}",
        )
    return render_mcp_tool(offered[mcp_tool_name], server.server_name)
