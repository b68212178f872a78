"""A small MCP server written with the official `mcp` SDK, served by the tests over
streamable HTTP and SSE on free ports (in a thread of the test process), recording the
headers of every request it gets."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from tests.e2e.conftest import free_port


def echo(message: str) -> str:
    """Echo a message back."""
    return message


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def fail(reason: str) -> str:
    """Always fails with the reason."""
    raise ToolError(reason)


@dataclass
class Gate:
    """Holds calls of the `hold` tool until the test lets them go."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    calls: int = 0


def build(gate: Gate) -> MCPServer:
    server = MCPServer("o-test-tools", log_level="ERROR")
    for tool in (echo, add, fail):
        server.add_tool(tool)

    async def hold(tag: str) -> str:
        """Wait until the test lets go."""
        gate.calls += 1
        gate.entered.set()
        await anyio.to_thread.run_sync(gate.release.wait)
        return f"held {tag}"

    server.add_tool(hold)
    return server


# The token the locked server (Served.locked_url) wants, as `Authorization: Bearer <it>`.
LOCK_TOKEN = "lock-token"


@dataclass
class Served:
    mcp: MCPServer
    gate: Gate
    http_url: str
    sse_url: str
    # Streamable HTTP that answers 401 without LOCK_TOKEN (as an OAuth-protected one does).
    locked_url: str = ""
    headers: list[dict[str, str]] = field(default_factory=list)


class _Recording:
    """ASGI middleware: what headers each HTTP request carried."""

    def __init__(self, app: Any, seen: list[dict[str, str]]) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await self.app(scope, receive, send)


class _Locked:
    """ASGI middleware: 401 with a Bearer challenge unless the request carries LOCK_TOKEN."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if given != f"Bearer {LOCK_TOKEN}".encode():
                headers = [(b"www-authenticate", b"Bearer"), (b"content-type", b"text/plain")]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)


@contextmanager
def _serve(app: Any, port: int) -> Iterator[None]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:  # a readiness poll, bounded
        assert thread.is_alive() and time.monotonic() < deadline, "MCP test server did not start"
        time.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def served() -> Iterator[Served]:
    gate = Gate()
    mcp = build(gate)
    http_port, sse_port, locked_port = free_port(), free_port(), free_port()
    result = Served(
        mcp,
        gate,
        f"http://127.0.0.1:{http_port}/mcp",
        f"http://127.0.0.1:{sse_port}/sse",
        f"http://127.0.0.1:{locked_port}/mcp",
    )
    # (An app of its own: one server's streamable HTTP session manager runs once.)
    locked = build(Gate())
    with (
        _serve(_Recording(mcp.streamable_http_app(), result.headers), http_port),
        _serve(_Recording(mcp.sse_app(), result.headers), sse_port),
        _serve(_Locked(locked.streamable_http_app()), locked_port),
    ):
        try:
            yield result
        finally:
            gate.release.set()  # no held call keeps a server from stopping
