"""Asking a stdio MCP server through the tool sandbox that runs it (core NATS request).

The gateway and the executor never start a user's program: they send an
`McpStdioRequest` to `o.rpc.sandbox.mcp_stdio`, and a sandbox replica answers
(o_tool_sandbox/mcp_requests.py). Every way this can fail (no sandbox running, no
answer in time, the server down, slow or answering garbage) is an `McpUnavailable`
with the reason, exactly as for a server asked over HTTP.
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from o_contracts import subjects
from o_contracts.mcp_stdio import McpStdioReply, McpStdioRequest, StdioServerSpec
from o_runtime.mcp_client import McpUnavailable, OfferedTool, ToolOutcome
from o_runtime.watched_requests import MAX_ASKS, AnswererLost, request_watched

# The sandbox answers within the caller's timeout; this is the reply's way back.
REPLY_MARGIN = 5.0


class NatsStdioRelay:
    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc

    async def list_tools(self, server: StdioServerSpec, timeout: float) -> list[OfferedTool]:
        reply = await self._ask(
            McpStdioRequest(server=server, operation="list_tools", timeout=timeout)
        )
        return [OfferedTool(t.name, t.description, t.input_schema) for t in reply.tools]

    async def call_tool(
        self, server: StdioServerSpec, name: str, args: dict[str, Any], timeout: float
    ) -> ToolOutcome:
        request = McpStdioRequest(
            server=server, operation="call_tool", tool_name=name, arguments=args, timeout=timeout
        )
        reply = await self._ask(request)
        return ToolOutcome(text=reply.text, ok=not reply.is_error)

    async def _ask(self, request: McpStdioRequest) -> McpStdioReply:
        try:
            # Watched (o_runtime/watched_requests.py): a sandbox replica that dies with the
            # request is noticed at once. A listing is asked again; a call is not (it may
            # have run in part), it fails with the reason.
            msg = await request_watched(
                self.nc,
                subjects.SANDBOX_MCP_STDIO,
                request.encode(),
                role="tool_sandbox",
                timeout=request.timeout + REPLY_MARGIN,
                max_asks=1 if request.operation == "call_tool" else MAX_ASKS,
            )
        except NoRespondersError as exc:
            raise McpUnavailable("no tool sandbox is running to start stdio MCP servers") from exc
        except AnswererLost as exc:
            raise McpUnavailable(
                "the tool sandbox running the server stopped during the call; it may have"
                " run in part, so it was not made again"
            ) from exc
        except (NatsTimeout, TimeoutError) as exc:
            raise McpUnavailable(
                f"the tool sandbox did not answer within {request.timeout:g} s"
            ) from exc
        try:
            reply = McpStdioReply.decode(msg.data)
        except Exception as exc:  # a sandbox of another version, say
            raise McpUnavailable(f"the tool sandbox answered garbage: {exc}") from exc
        if not reply.ok:
            raise McpUnavailable(reply.error or "the tool sandbox could not ask the server")
        return reply
