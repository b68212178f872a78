"""Asking an MCP server for its tools before (or apart from) registering it: Letta's
"test" and "connect" routes, which the ADE calls while a user fills in a server's form.

Nothing is recorded: the config is checked as creating the server would check it (the
private-address policy, a stdio environment that must be encryptable to reach the
sandbox), then the server is asked for its tools once, as a refresh asks it. A stdio
server is started by the tool sandbox under a name derived from its config, so testing
the same config again reuses the process, which stops when idle like any other
(docs/mcp.md).

`connect` answers as a stream of events, as Letta's does: `connection_attempt`, then
`success` with the tools or `error` with the reason. An HTTP server that answers 401 goes on
to MCP's OAuth sign-in (mcp_sign_in.py); one that has a recorded sign-in is asked with its
tokens first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator

from o_contracts.mcp_stdio import StdioServerSpec
from o_gateway.mcp_registry import check_url, encrypt, relay, signed_in
from o_gateway.mcp_schemas import SseConfig, StdioConfig, StreamableHttpConfig
from o_gateway.mcp_sign_in import event, render_offered, sign_in
from o_gateway.state import Gateway
from o_runtime import mcp_client
from o_runtime.mcp_client import McpEndpoint, OfferedTool, http_headers

# Seconds a test or connect waits for the server (starting a stdio one included).
PROBE_SECONDS = 30.0


def probe_name(config: StdioConfig) -> str:
    """The sandbox's name for a stdio config under test: the same config, the same process
    (its environment by name only: values are ciphertext, new at every encryption)."""
    body = json.dumps([config.command, config.args, sorted(config.env or {})])
    return "mcp_server-probe-" + hashlib.sha256(body.encode()).hexdigest()[:16]


async def endpoint_of(
    gw: Gateway, config: StdioConfig | SseConfig | StreamableHttpConfig
) -> McpEndpoint:
    """Where the unregistered server is, with the sign-in its address has; 422 for an
    address the policy refuses, 400 for an environment that cannot be encrypted (no
    O_SECRETS_KEY), as on creation."""
    if isinstance(config, StdioConfig):
        spec = StdioServerSpec(
            mcp_server_id=probe_name(config),
            command=config.command,
            args=config.args,
            encrypted_env=encrypt(config.env) or {},
        )
        return McpEndpoint("stdio", None, {}, stdio=spec)
    check_url(config.server_url, gw.settings.mcp_allow_private_urls)
    headers = http_headers(config.auth_header, config.auth_token, config.custom_headers)
    oauth = await signed_in(gw, config.server_url)
    return McpEndpoint(config.mcp_server_type, config.server_url, headers, oauth=oauth)


async def tools_offered(gw: Gateway, endpoint: McpEndpoint) -> list[OfferedTool]:
    """The server's tools (McpUnavailable, or McpUnauthorized, when it cannot say)."""
    return await mcp_client.list_tools(endpoint, PROBE_SECONDS, relay(gw))


async def connect_events(
    gw: Gateway, server_name: str, endpoint: McpEndpoint, redirect: str
) -> AsyncIterator[bytes]:
    """Letta's connect stream: the attempt, then the tools or why there are none; an HTTP
    server that answers 401 goes on to the OAuth sign-in (`redirect`: O's callback)."""
    yield event("connection_attempt", server_name=server_name)
    try:
        tools = await tools_offered(gw, endpoint)
    except mcp_client.McpUnauthorized:
        async for said in sign_in(gw, server_name, endpoint, redirect):
            yield said
        return
    except mcp_client.McpUnavailable as exc:
        yield event("error", message=f"Connection failed: {exc}")
        return
    yield event("success", tools=[render_offered(t) for t in tools])
