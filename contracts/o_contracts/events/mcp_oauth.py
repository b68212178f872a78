"""An MCP server's OAuth sign-in, appended on `o.evt.mcp_server.oauth.<session_id>`.

The gateway runs the sign-in when a client connects a server that answers 401
(docs/mcp.md): it records the start, the authorization server's answer that comes back
through the browser, and the tokens it got for the code. Whoever later uses the tokens
and has to refresh them (the gateway listing a server's tools, the executor calling
one) records the new ones.

Everything that would let someone act as the user is a secret: the authorization code,
the tokens and the client's registration (its secret) travel only as Fernet
ciphertext under `O_SECRETS_KEY` (o_runtime/tool_secrets.py). The `state` that the
callback is matched by is recorded as its SHA-256 digest only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from o_contracts.base import Event


class McpOAuthStarted(Event):
    """The user was sent to the authorization server to sign in to `server_url`."""

    session_id: str
    server_url: str
    server_name: str
    # SHA-256 (hex) of the `state` in the authorization URL: the callback finds the
    # sign-in by it.
    state_digest: str
    # Where the authorization server sends the browser back to (O's callback route).
    redirect_uri: str


class McpOAuthCallbackReceived(Event):
    """The browser came back from the authorization server: with a code, or an error."""

    session_id: str
    encrypted_code: str | None = None
    # RFC 9207's `iss`, when the authorization server sends it.
    iss: str | None = None
    error: str | None = None
    error_description: str | None = None


class McpOAuthAuthorized(Event):
    """The code was exchanged: the server's calls carry these tokens from now on."""

    session_id: str
    server_url: str
    # Fernet of the token response (mcp's OAuthToken as JSON: access and refresh token,
    # type, scope).
    encrypted_tokens: str
    # When the access token expires (None: the authorization server did not say).
    expires_at: datetime | None = None
    scope: str | None = None
    # Fernet of the client's registration with the authorization server (its id and
    # secret: mcp's OAuthClientInformationFull as JSON).
    encrypted_client: str
    # The authorization server's metadata (RFC 8414, public): where a refresh goes.
    oauth_metadata: dict[str, Any] | None = None


class McpOAuthTokensRefreshed(Event):
    """The access token expired and was refreshed by whoever needed it."""

    session_id: str
    encrypted_tokens: str
    expires_at: datetime | None = None
    scope: str | None = None


class McpOAuthFailed(Event):
    """The sign-in ended without tokens (refused, timed out, the exchange failed)."""

    session_id: str
    reason: str
