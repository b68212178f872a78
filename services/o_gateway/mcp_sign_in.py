"""MCP's OAuth sign-in, as Letta's connect routes run it (docs/mcp.md).

A client connects a server (`POST /v1/tools/mcp/servers/connect`, `GET
/v1/mcp-servers/connect/{id}`) that answers HTTP 401. The gateway then signs in with the
`mcp` SDK's OAuth provider (discovery, registration, PKCE), which gives an authorization
URL: the stream hands it to the client (`authorization_url`), whose user signs in in a
browser. The authorization server sends the browser back to O's callback route with a
code, possibly to another gateway replica: the callback records what came back
(McpOAuthCallbackReceived) and the gateway holding the stream hears it on the sign-in's
subject, exchanges the code for tokens, records them (McpOAuthAuthorized) and lists the
server's tools with them. Every call to that address uses them from then on
(o_runtime/mcp_oauth.py).

The stream holds the PKCE verifier in memory: a gateway that dies mid-sign-in ends its
stream, and the user connects again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlparse

from fastapi import Request

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.events import (
    McpOAuthAuthorized,
    McpOAuthCallbackReceived,
    McpOAuthFailed,
    McpOAuthStarted,
)
from o_contracts.ids import new_id
from o_contracts.projection_names import MCP_SERVERS
from o_gateway.commands import PRODUCER
from o_gateway.mcp_registry import refused_address
from o_gateway.state import Gateway
from o_runtime import mcp_client, mcp_oauth, tool_secrets
from o_runtime.log_news import look_until
from o_runtime.mcp_client import McpEndpoint, OfferedTool, SignInFailed

CALLBACK_PATH = "/v1/tools/mcp/oauth/callback"
# One exchange with the server or its authorization server.
EXCHANGE_SECONDS = 30.0
# The callback's parameters are short; longer ones are refused, not recorded.
MAX_PARAM_CHARS = 4096


def event(kind: str, **fields: Any) -> bytes:
    """One event of the connect stream, Letta's shape: `data:` lines, the kind inside."""
    return f"data: {json.dumps({'event': kind, **fields})}\n\n".encode()


def redirect_uri(gw: Gateway, request: Request) -> str:
    """Where the authorization server sends the browser back: O_PUBLIC_URL's callback, or
    the callback at the address the client reached this gateway by."""
    base = gw.settings.public_url or str(request.base_url)
    return base.rstrip("/") + CALLBACK_PATH


class _SignIn:
    """One sign-in in progress: the SDK's handlers and storage, and what the stream says."""

    def __init__(self, gw: Gateway, server_name: str, url: str, redirect: str) -> None:
        self.gw = gw
        self.server_name = server_name
        self.url = url
        self.redirect = redirect
        self.session_id = new_id("mcp_oauth")
        self.subject = subjects.mcp_oauth_subject(session_id=self.session_id)
        self.news: asyncio.Queue[bytes] = asyncio.Queue()
        self.state: str | None = None
        self.started_seq = 0
        self.client: Any = None
        self.provider: Any = None

    async def _append(self, data: Any) -> int:
        appended = await self.gw.eventlog.append(
            self.subject, Envelope.wrap(data, aggregate_id=self.session_id, producer=PRODUCER)
        )
        return appended.seq

    # -- the SDK's handlers -------------------------------------------------------------

    async def on_authorization_url(self, url: str) -> None:
        state = parse_qs(urlparse(url).query).get("state", [""])[0]
        self.state = state
        seq = await self._append(
            McpOAuthStarted(
                session_id=self.session_id,
                server_url=self.url,
                server_name=self.server_name,
                state_digest=mcp_oauth.state_digest(state),
                redirect_uri=self.redirect,
            )
        )
        # The callback finds the sign-in in the projection: there before the user is sent.
        await self.gw.visible(seq, MCP_SERVERS)
        self.started_seq = seq
        self.news.put_nowait(event("authorization_url", url=url, session_id=self.session_id))
        self.news.put_nowait(event("waiting_for_auth", message="Waiting for user authorization..."))

    async def _came_back(self) -> McpOAuthCallbackReceived | None:
        if await self.gw.eventlog.last_seq(self.subject) <= self.started_seq:
            return None
        for recorded in await self.gw.eventlog.read_subject(self.subject):
            if isinstance(recorded.envelope.data, McpOAuthCallbackReceived):
                return recorded.envelope.data
        return None

    async def on_callback(self) -> Any:
        from mcp.client.auth import AuthorizationCodeResult

        wait = self.gw.settings.mcp_oauth_wait
        back = await look_until(
            self.gw.eventlog.nc, self.subject, lambda _: True, self._came_back, wait
        )
        if back is None:
            raise SignInFailed(f"no authorization within {wait:g} s")
        if back.error:
            detail = f" - {back.error_description}" if back.error_description else ""
            raise SignInFailed(f"OAuth error: {back.error}{detail}")
        if not back.encrypted_code:
            raise SignInFailed("Missing authorization code")
        code = mcp_oauth.unseal(back.encrypted_code)
        return AuthorizationCodeResult(code=code, state=self.state, iss=back.iss)

    # -- the SDK's storage (tokens are recorded once they come) -------------------------

    async def get_tokens(self) -> Any:
        return None

    async def set_tokens(self, tokens: Any) -> None:
        metadata = self.provider.context.oauth_metadata if self.provider is not None else None
        # (Seen before the stream says success: a server registered next is called with it.)
        seq = await self._append(
            McpOAuthAuthorized(
                session_id=self.session_id,
                server_url=self.url,
                encrypted_tokens=mcp_oauth.seal(mcp_oauth.token_json(tokens)),
                expires_at=mcp_oauth.expiry(tokens.expires_in),
                scope=tokens.scope,
                encrypted_client=mcp_oauth.seal(self.client.model_dump_json()),
                oauth_metadata=mcp_oauth.metadata_json(metadata),
            )
        )
        await self.gw.visible(seq, MCP_SERVERS)

    async def get_client_info(self) -> Any:
        return self.client

    async def set_client_info(self, info: Any) -> None:
        self.client = info

    def guard(self, url: str) -> None:
        """Discovery, registration and token requests go where the server's metadata
        points: held to the private-address policy that the server's own URL is."""
        reason = refused_address(url, self.gw.settings.mcp_allow_private_urls)
        if reason is not None:
            raise SignInFailed(f"refused to send a sign-in request to {url}: {reason}")

    # -- the stream ---------------------------------------------------------------------

    async def run(self, endpoint: McpEndpoint) -> AsyncIterator[bytes]:
        from mcp.client.auth import OAuthClientProvider

        self.provider = OAuthClientProvider(
            self.url,
            mcp_oauth.client_metadata(self.redirect),
            self,
            redirect_handler=self.on_authorization_url,
            callback_handler=self.on_callback,
        )
        # (The stored sign-in, if any, was refused: this one starts afresh.)
        fresh = McpEndpoint(endpoint.server_type, endpoint.url, endpoint.headers)
        within = self.gw.settings.mcp_oauth_wait + 4 * EXCHANGE_SECONDS
        listing = asyncio.create_task(
            mcp_client.list_tools(
                fresh, EXCHANGE_SECONDS, sign_in=self.provider, within=within, guard=self.guard
            )
        )
        said: asyncio.Task[bytes] | None = None
        try:
            while not listing.done():
                said = asyncio.create_task(self.news.get())
                await asyncio.wait({listing, said}, return_when=asyncio.FIRST_COMPLETED)
                if said.done():
                    yield said.result()
                said.cancel()
            while not self.news.empty():
                yield self.news.get_nowait()
            try:
                tools = listing.result()
            except mcp_client.McpUnavailable as exc:
                if self.started_seq:
                    await self._append(McpOAuthFailed(session_id=self.session_id, reason=str(exc)))
                yield event("error", message=f"OAuth sign-in failed: {exc}")
                return
            yield event("success", tools=[render_offered(t) for t in tools])
        finally:
            # (A client that went away: the sign-in stops; its record stays pending.)
            listing.cancel()
            if said is not None:
                said.cancel()


def render_offered(tool: OfferedTool) -> dict[str, Any]:
    """A tool as the MCP server described it (the protocol's field names, as Letta shows)."""
    return {"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema}


async def sign_in(
    gw: Gateway, server_name: str, endpoint: McpEndpoint, redirect: str
) -> AsyncIterator[bytes]:
    """The sign-in's part of a connect stream, after the server answered 401."""
    yield event("oauth_required", message="OAuth authentication required")
    if endpoint.server_type == "stdio" or not endpoint.url:
        yield event("error", message="OAuth not supported for stdio")
        return
    try:
        mcp_oauth.seal("")  # tokens are kept sealed: no key, no sign-in
    except tool_secrets.SecretsUnavailable as exc:
        yield event("error", message=f"OAuth sign-in needs {tool_secrets.KEY_ENV}: {exc}")
        return
    async for said in _SignIn(gw, server_name, endpoint.url, redirect).run(endpoint):
        yield said


async def called_back(
    gw: Gateway,
    code: str | None,
    state: str | None,
    error: str | None,
    error_description: str | None,
    iss: str | None,
) -> dict[str, Any]:
    """The browser's return from the authorization server: recorded for the sign-in its
    state names. Letta's answers (always 200, the outcome in the body)."""
    if not state:
        return {"status": "error", "message": "Missing state parameter"}
    if any(len(p or "") > MAX_PARAM_CHARS for p in (code, state, error, error_description, iss)):
        return {"status": "error", "message": "Invalid callback parameters (too long)"}
    # (Past the wait, the stream that held the sign-in has ended: nobody would take a code.)
    row = await gw.pool.fetchrow(
        "SELECT id, server_url, status, created_at + make_interval(secs => $2) < now()"
        " AS expired FROM mcp_oauth_sessions WHERE state_digest = $1",
        mcp_oauth.state_digest(state),
        gw.settings.mcp_oauth_wait + EXCHANGE_SECONDS,
    )
    if row is None or row["status"] != "pending" or row["expired"]:
        return {"status": "error", "message": "Invalid or expired state parameter"}
    session_id = row["id"]
    received = McpOAuthCallbackReceived(
        session_id=session_id,
        encrypted_code=mcp_oauth.seal(code) if code and not error else None,
        iss=iss,
        error=error,
        error_description=error_description,
    )
    await gw.eventlog.append(
        subjects.mcp_oauth_subject(session_id),
        Envelope.wrap(received, aggregate_id=session_id, producer=PRODUCER),
    )
    if error:
        detail = f" - {error_description}" if error_description else ""
        return {"status": "error", "message": f"OAuth error: {error}{detail}"}
    if not code:
        return {"status": "error", "message": "Missing authorization code"}
    return {
        "status": "success",
        "message": "Authorization successful",
        "server_url": row["server_url"],
    }
