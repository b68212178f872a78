"""Answering `o.rpc.sandbox.mcp_stdio`: list a stdio MCP server's tools, or call one.

The caller's timeout covers everything (starting the server included); a call is also
bounded by O_MCP_STDIO_CALL_SECONDS. Whatever goes wrong (the environment does not
decrypt, the command is not found, the server does not start, crashes, does not
answer in time, answers garbage) is an `ok=False` reply with the reason: the caller
turns it into the tool's error. Nothing is recorded here: the executor records the
call before it asks and the outcome after (docs/mcp.md).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from o_contracts.limits import NATS_MAX_PAYLOAD
from o_contracts.mcp_stdio import McpStdioReply, McpStdioRequest, McpToolListing
from o_contracts.requests import first_error
from o_runtime.tool_secrets import SecretsUnavailable, decrypt_all
from o_tool_sandbox.mcp_process import StdioFailure
from o_tool_sandbox.mcp_servers import StdioServers

log = logging.getLogger(__name__)

# A tool's text is cut here (the agent's return_char_limit cuts further); the reply
# must fit in one NATS message.
MAX_TEXT = 256 * 1024
REPLY_ROOM = NATS_MAX_PAYLOAD - 16 * 1024


class McpStdioRequests:
    def __init__(self, servers: StdioServers, replica: str) -> None:
        self.servers = servers
        self.replica = replica

    async def handle(self, body: bytes) -> bytes:
        try:
            request = McpStdioRequest.decode(body)
        except Exception as exc:  # malformed msgpack or a ValidationError
            return self._failed(f"malformed request: {first_error(exc)}")
        try:
            reply = await self._answer(request)
        except StdioFailure as exc:
            return self._failed(str(exc))
        encoded = reply.encode()
        if len(encoded) > REPLY_ROOM:
            return self._failed(f"the MCP server's answer is too large ({len(encoded)} bytes)")
        return encoded

    async def _answer(self, request: McpStdioRequest) -> McpStdioReply:
        deadline = time.monotonic() + request.timeout
        try:
            env = decrypt_all(request.server.encrypted_env)
        except SecretsUnavailable as exc:
            raise StdioFailure(f"the server's environment cannot be read: {exc}") from exc
        server = await self.servers.server(request.server, env)
        await server.ready(max(deadline - time.monotonic(), 0.0))
        timeout = min(deadline - time.monotonic(), self.servers.settings.call_seconds)
        if timeout <= 0:
            raise StdioFailure(f"the MCP server took the whole {request.timeout:g} s to start")
        if request.operation == "list_tools":
            tools = await server.list_tools(timeout)
            return McpStdioReply(
                ok=True,
                sandbox=self.replica,
                tools=[
                    McpToolListing(
                        name=t.name,
                        description=t.description,
                        input_schema=dict(t.input_schema or {}),
                    )
                    for t in tools
                ],
            )
        result = await server.call_tool(request.tool_name or "", request.arguments, timeout)
        return McpStdioReply(
            ok=True,
            sandbox=self.replica,
            text=_cut(_text(result)),
            is_error=bool(getattr(result, "is_error", False)),
        )

    def _failed(self, reason: str) -> bytes:
        return McpStdioReply(ok=False, error=reason, sandbox=self.replica).encode()


def _text(result: Any) -> str:
    parts = [getattr(c, "text", None) for c in getattr(result, "content", None) or []]
    return "\n".join(p for p in parts if isinstance(p, str))


def _cut(text: str) -> str:
    if len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"\n[truncated: the return was {len(text)} characters]"
