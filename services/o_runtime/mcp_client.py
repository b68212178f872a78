"""Talking to an MCP server through the official `mcp` SDK: list its tools, call one.

Used by the gateway (listing, refresh, a tool run from the API) and by the executor (an
agent's call of an MCP tool); docs/mcp.md says why there.

sse and streamable_http servers are asked from here: each call opens a session, does
one thing and closes it: the gateway keeps no connection to anything a client
registered, so any replica can answer and a server that went away costs one failed
call, not a broken pool. stdio servers are programs users bring: the tool sandbox runs
them, confined, and a `StdioRelay` (mcp_stdio_relay.py) asks it over NATS. Every
failure (refused, timed out, garbage on the wire, crashed) is an `McpUnavailable` with
the reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from o_contracts.mcp_stdio import StdioServerSpec
from o_runtime import mcp_oauth, tool_secrets
from o_runtime.mcp_oauth import SignedIn

T = TypeVar("T")


class McpUnavailable(Exception):
    """The server could not be asked (the reason is the message)."""


class McpUnauthorized(McpUnavailable):
    """The server answered HTTP 401: it wants credentials the request did not carry (a
    token, or MCP's OAuth sign-in: o_gateway/mcp_sign_in.py)."""


class SignInFailed(McpUnavailable):
    """An OAuth sign-in ended without tokens (the reason is the message)."""


UNAUTHORIZED = (
    "the server asks for authorization (HTTP 401): give it a token (auth_header and "
    "auth_token, or custom_headers), or connect it to sign in with OAuth"
)


def _chain(exc: BaseException) -> list[BaseException]:
    """An error and every error it wraps (causes, contexts, exception groups)."""
    seen: set[int] = set()
    found: list[BaseException] = []
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        found.append(current)
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                todo.append(linked)
    return found


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status an error of the transport carries, wherever it is wrapped."""
    for current in _chain(exc):
        status = getattr(getattr(current, "response", None), "status_code", None)
        if isinstance(status, int):
            return status
    return None


def _ours(exc: BaseException) -> McpUnavailable | None:
    """An McpUnavailable raised inside the transport (by an OAuth handler), if any."""
    for current in _chain(exc):
        if isinstance(current, McpUnavailable):
            return current
    return None


@dataclass(frozen=True)
class McpEndpoint:
    """Where a server is and what goes with each request (secrets in plaintext: held in
    memory for one call, never recorded)."""

    server_type: str
    url: str | None
    headers: dict[str, str]
    # False when a secret did not decrypt (the key was rotated): calls fail saying so.
    secrets_readable: bool = True
    # A stdio server: how the sandbox starts it (its environment as ciphertext).
    stdio: StdioServerSpec | None = None
    # The server's OAuth sign-in, when it has one (mcp_oauth.py).
    oauth: SignedIn | None = None


def http_headers(
    auth_header: str | None, auth_token: str | None, custom: dict[str, str] | None
) -> dict[str, str]:
    """What goes with every request to an sse or streamable_http server."""
    headers = dict(custom or {})
    if auth_token:
        headers[auth_header or "Authorization"] = auth_token
    return headers


@dataclass(frozen=True)
class OfferedTool:
    name: str
    description: str | None
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class ToolOutcome:
    text: str
    ok: bool


class StdioRelay(Protocol):
    """Asks the tool sandbox, which runs stdio servers (mcp_stdio_relay.py)."""

    async def list_tools(self, server: StdioServerSpec, timeout: float) -> list[OfferedTool]: ...

    async def call_tool(
        self, server: StdioServerSpec, name: str, args: dict[str, Any], timeout: float
    ) -> ToolOutcome: ...


def _reason(exc: BaseException) -> str:
    # anyio task groups wrap the transport's error: the innermost one says what happened.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if str(exc) else text


def _auth(server: McpEndpoint, sign_in: Any | None) -> Any | None:
    """The OAuth provider a call goes with: a sign-in's in progress, or the recorded one's."""
    if sign_in is not None or server.oauth is None:
        return sign_in
    try:
        return mcp_oauth.provider(server.oauth)
    except tool_secrets.SecretsUnavailable as exc:
        raise McpUnavailable(f"this server's OAuth tokens cannot be read: {exc}") from exc


# Says why a request may not be sent to a URL by raising McpUnavailable (the OAuth
# sign-in's: its discovery and token requests go where the server's metadata points).
RequestGuard = Callable[[str], None]


@asynccontextmanager
async def _session(
    server: McpEndpoint,
    timeout: float,
    sign_in: Any | None = None,
    guard: RequestGuard | None = None,
) -> AsyncIterator[Any]:
    if not server.secrets_readable:
        raise McpUnavailable(
            "this server's token or headers do not decrypt with the current O_SECRETS_KEY "
            "(was the key rotated?): set them again"
        )
    try:
        import httpx2
        from mcp import ClientSession
        from mcp.client.sse import sse_client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client
    except ImportError as exc:
        raise McpUnavailable(f"the mcp package is not installed: {exc}") from exc
    url = server.url or ""
    headers = server.headers
    # The streamable HTTP transport turns an HTTP error into a JSON-RPC one, status lost:
    # its client notes a 401 as it comes. (The SSE transport raises the HTTP error.)
    refused: list[int] = []

    async def note(response: Any) -> None:
        if response.status_code == 401:
            refused.append(401)

    async def check(request: Any) -> None:
        if guard is not None:
            guard(str(request.url))

    def guarded_client(
        headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None
    ) -> Any:
        # (Hooks see the auth flow's own requests too: discovery, registration, token.)
        client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
        client.event_hooks["request"].append(check)
        return client

    auth = _auth(server, sign_in)
    if server.server_type == "sse":
        transport = sse_client(
            url,
            headers=headers,
            timeout=timeout,
            sse_read_timeout=timeout,
            auth=auth,
            httpx_client_factory=guarded_client,
        )
    else:
        client = guarded_client(headers=headers, timeout=httpx2.Timeout(timeout), auth=auth)
        client.event_hooks["response"].append(note)
        transport = streamable_http_client(url, http_client=client)
    try:
        async with transport as streams, ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            yield session
    except Exception as exc:
        ours = _ours(exc)
        if ours is not None:
            raise ours from exc
        if refused or _http_status(exc) == 401:
            reason = mcp_oauth.SIGN_IN_AGAIN if server.oauth is not None else UNAUTHORIZED
            raise McpUnauthorized(reason) from exc
        raise


def _stdio(server: McpEndpoint, relay: StdioRelay | None) -> tuple[StdioServerSpec, StdioRelay]:
    if server.stdio is None or relay is None:
        raise McpUnavailable("stdio MCP servers are reached through the tool sandbox only")
    return server.stdio, relay


async def list_tools(
    server: McpEndpoint,
    timeout: float,
    relay: StdioRelay | None = None,
    *,
    sign_in: Any | None = None,
    within: float | None = None,
    guard: RequestGuard | None = None,
) -> list[OfferedTool]:
    """The server's tools; `timeout` for each exchange, `within` for all of it (a sign-in
    in progress, `sign_in`, waits for a person); `guard` sees every request's URL first."""
    if server.server_type == "stdio":
        spec, sandbox = _stdio(server, relay)
        return await sandbox.list_tools(spec, timeout)

    async def ask() -> list[OfferedTool]:
        async with _session(server, timeout, sign_in, guard) as session:
            listed = await session.list_tools()
            return [
                OfferedTool(t.name, t.description, dict(t.input_schema or {})) for t in listed.tools
            ]

    return await _bounded(ask(), within or timeout)


async def call_tool(
    server: McpEndpoint,
    name: str,
    args: dict[str, Any],
    timeout: float,
    relay: StdioRelay | None = None,
) -> ToolOutcome:
    if server.server_type == "stdio":
        spec, sandbox = _stdio(server, relay)
        return await sandbox.call_tool(spec, name, args, timeout)

    async def ask() -> ToolOutcome:
        async with _session(server, timeout) as session:
            result = await session.call_tool(name, args)
            parts = [getattr(c, "text", None) for c in getattr(result, "content", None) or []]
            text = "\n".join(p for p in parts if isinstance(p, str))
            return ToolOutcome(text=text, ok=not getattr(result, "is_error", False))

    return await _bounded(ask(), timeout)


async def _bounded(work: Coroutine[Any, Any, T], timeout: float) -> T:
    try:
        async with asyncio.timeout(timeout):
            return await work
    except McpUnavailable:
        raise
    except TimeoutError as exc:
        raise McpUnavailable(f"no answer within {timeout:g} s") from exc
    except Exception as exc:  # any failure of a server we do not control
        raise McpUnavailable(_reason(exc)) from exc
