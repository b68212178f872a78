"""An MCP server behind MCP's OAuth, written with the official `mcp` SDK: its own
authorization server on the same origin (discovery metadata, dynamic registration,
/authorize, /token with PKCE), whose user approves every sign-in at once. The tests play
the browser: they follow the authorization URL O hands out, and its redirect to O's
callback.

What it issued and what it saw are kept, so that a test can see a refresh happen, revoke
tokens, and tell which token each MCP request carried."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from tests.e2e.conftest import free_port
from tests.e2e.mcp_server import _serve


@dataclass
class Issuer(OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]):
    """An authorization server that approves at once; tokens last `lifetime` seconds."""

    lifetime: int = 3600
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    # What happened, in order: "registered", "authorized", "exchanged", "refreshed".
    log: list[str] = field(default_factory=list)

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info
        self.log.append("registered")

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
        )
        self.log.append("authorized")
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str]) -> OAuthToken:
        access, refresh = "at-" + secrets.token_urlsafe(16), "rt-" + secrets.token_urlsafe(16)
        expires = int(time.time()) + self.lifetime
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires
        )
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes)
        return OAuthToken(
            access_token=access,
            expires_in=self.lifetime,
            refresh_token=refresh,
            scope=" ".join(scopes) or None,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        self.log.append("exchanged")
        return self._issue(client.client_id or "", authorization_code.scopes)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        # Rotated, as the SDK's docs ask: the old refresh token is spent.
        del self.refresh[refresh_token.token]
        self.log.append("refreshed")
        return self._issue(client.client_id or "", scopes or refresh_token.scopes)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    def revoke_all(self) -> None:
        self.access.clear()
        self.refresh.clear()


def whisper(word: str) -> str:
    """Say a word back, quietly."""
    return f"psst: {word}"


@dataclass
class OAuthServed:
    issuer: Issuer
    url: str


def build(issuer: Issuer, origin: str, path: str) -> MCPServer:
    server = MCPServer(
        "o-test-oauth",
        log_level="ERROR",
        auth_server_provider=issuer,
        auth=AuthSettings(
            issuer_url=origin,
            resource_server_url=f"{origin}{path}",
            client_registration_options=ClientRegistrationOptions(enabled=True),
            validate_token_resource=False,
        ),
    )
    server.add_tool(whisper)
    return server


@contextmanager
def oauth_served(lifetime: int = 3600, kind: str = "streamable_http") -> Iterator[OAuthServed]:
    """A signed-in-only MCP server on a free port (streamable HTTP at /mcp, or SSE at
    /sse); tokens last `lifetime` seconds."""
    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    issuer = Issuer(lifetime=lifetime)
    path = "/sse" if kind == "sse" else "/mcp"
    server = build(issuer, origin, path)
    app = server.sse_app() if kind == "sse" else server.streamable_http_app()
    with _serve(app, port):
        yield OAuthServed(issuer, f"{origin}{path}")
