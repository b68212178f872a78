"""An agent's call of an MCP server's tool: the executor asks an sse or streamable_http
server itself, and a stdio server through the tool sandbox that runs it (over NATS).

The loop records ToolCallRequested before this runs and the outcome after, as for any
tool; a server that is down, slow or answers garbage is the tool's error, with the
reason, and the run goes on. The server's token and header values are decrypted here,
in memory, for this one call (the executor needs O_SECRETS_KEY for servers that have
them); a stdio server's environment stays ciphertext here: only the sandbox decrypts it.
A server signed in to with OAuth gets its recorded tokens, refreshed (and the refresh
recorded) when they have expired (o_runtime/mcp_oauth.py).
"""

from __future__ import annotations

from typing import Any

from o_contracts.mcp_stdio import StdioServerSpec
from o_executor.run.agent import McpServerRef
from o_executor.run.deps import ToolOutcome
from o_runtime import mcp_client, tool_secrets
from o_runtime.mcp_oauth import SignedIn


def endpoint(ref: McpServerRef, oauth: SignedIn | None = None) -> mcp_client.McpEndpoint:
    if ref.server_type == "stdio":
        spec = StdioServerSpec(
            mcp_server_id=ref.server_id,
            command=ref.command or "",
            args=list(ref.args),
            encrypted_env=ref.encrypted_env or {},
        )
        return mcp_client.McpEndpoint("stdio", None, {}, stdio=spec)
    token = tool_secrets.decrypt_all(
        {"t": ref.encrypted_auth_token} if ref.encrypted_auth_token else {}
    ).get("t")
    custom = tool_secrets.decrypt_all(ref.encrypted_custom_headers or {})
    return mcp_client.McpEndpoint(
        ref.server_type,
        ref.url,
        mcp_client.http_headers(ref.auth_header, token, custom),
        oauth=oauth,
    )


async def run_mcp_tool(
    ref: McpServerRef,
    name: str,
    args: dict[str, Any],
    timeout: float,
    relay: mcp_client.StdioRelay,
    oauth: SignedIn | None = None,
) -> ToolOutcome:
    # request_heartbeat is the loop's argument, not the tool's.
    arguments = {k: v for k, v in args.items() if k != "request_heartbeat"}
    try:
        outcome = await mcp_client.call_tool(endpoint(ref, oauth), name, arguments, timeout, relay)
    except tool_secrets.SecretsUnavailable as exc:
        return ToolOutcome(False, f"MCP server could not be called: {exc}")
    except mcp_client.McpUnavailable as exc:
        return ToolOutcome(False, f"MCP server could not be called: {exc}")
    return ToolOutcome(outcome.ok, outcome.text)
