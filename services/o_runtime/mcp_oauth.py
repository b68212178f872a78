"""An MCP server's OAuth sign-in in use: the tokens a call presents, refreshed when due.

The gateway runs the sign-in itself (o_gateway/mcp_sign_in.py) and records its tokens
(o_contracts/events/mcp_oauth.py). Every later call to the server, from the gateway
(listing its tools, running one) or the executor (an agent's call), takes the newest
authorized sign-in to the server's address, as Letta does, and hands the `mcp` SDK's
OAuth provider its tokens: the SDK sends them as a bearer token and refreshes them
when they have expired. A refresh is recorded (McpOAuthTokensRefreshed) by the caller,
so the next call, in any process, starts from the new tokens.

A call never starts a new sign-in: that needs a person in a browser. A server that
refuses the recorded tokens (revoked, or a refresh refused) fails the call with a
reason that says to connect the server again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from o_runtime import tool_secrets

# A token is refreshed this long before it expires: a call that starts with a token about
# to expire would otherwise fail half-way.
REFRESH_MARGIN = 60.0

# The sign-in the server's address has (its newest authorized one), for `$1` a URL.
GRANT_SQL = (
    "SELECT id AS session_id, server_url, encrypted_tokens, expires_at, encrypted_client,"
    " oauth_metadata FROM mcp_oauth_sessions WHERE server_url = $1 AND status = 'authorized'"
    " ORDER BY updated_at DESC, last_seq DESC LIMIT 1"
)

SIGN_IN_AGAIN = (
    "the server refused the tokens of its OAuth sign-in (expired or revoked): connect the "
    "server again to sign in"
)


def state_digest(state: str) -> str:
    """What the log keeps of a sign-in's `state` (the callback finds the sign-in by it)."""
    return hashlib.sha256(state.encode()).hexdigest()


def seal(value: str) -> str:
    """A secret as the log keeps it (SecretsUnavailable without O_SECRETS_KEY)."""
    return tool_secrets.encrypt_all({"v": value})["v"]


def unseal(value: str) -> str:
    return tool_secrets.decrypt_all({"v": value})["v"]


def expiry(expires_in: int | None, now: float | None = None) -> datetime | None:
    """When a token that lasts `expires_in` seconds from now expires."""
    if expires_in is None:
        return None
    return datetime.fromtimestamp((now or time.time()) + expires_in, UTC)


@dataclass(frozen=True)
class OAuthGrant:
    """A recorded sign-in's tokens, sealed as the log holds them."""

    session_id: str
    server_url: str
    encrypted_tokens: str
    expires_at: datetime | None
    encrypted_client: str
    oauth_metadata: dict[str, Any] | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> OAuthGrant:
        return cls(
            session_id=row["session_id"],
            server_url=row["server_url"],
            encrypted_tokens=row["encrypted_tokens"],
            expires_at=row["expires_at"],
            encrypted_client=row["encrypted_client"],
            oauth_metadata=row["oauth_metadata"],
        )


# Records tokens a call refreshed: (the sign-in, the new token response as JSON, its
# expiry, its scope).
RecordRefresh = Callable[[str, str, datetime | None, str | None], Awaitable[None]]


@dataclass(frozen=True)
class SignedIn:
    """What a call to an OAuth server carries: the grant, and how to record a refresh."""

    grant: OAuthGrant
    record: RecordRefresh


def provider(signed_in: SignedIn) -> Any:
    """The `mcp` SDK's OAuth provider (an httpx2.Auth) for one call with these tokens.
    Raises SecretsUnavailable when they do not decrypt."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import (
        OAuthClientInformationFull,
        OAuthMetadata,
        OAuthToken,
    )

    grant = signed_in.grant
    tokens = OAuthToken.model_validate_json(unseal(grant.encrypted_tokens))
    client = OAuthClientInformationFull.model_validate_json(unseal(grant.encrypted_client))

    class Storage:
        async def get_tokens(self) -> OAuthToken | None:
            return tokens

        async def set_tokens(self, new: OAuthToken) -> None:
            nonlocal tokens
            tokens = new
            await signed_in.record(
                grant.session_id, new.model_dump_json(), expiry(new.expires_in), new.scope
            )

        async def get_client_info(self) -> OAuthClientInformationFull | None:
            return client

        async def set_client_info(self, info: OAuthClientInformationFull) -> None:
            # (Only a new sign-in registers again, and a call never gets that far.)
            pass

    class Recorded(OAuthClientProvider):
        async def _initialize(self) -> None:
            await super()._initialize()
            # The SDK knows a token's expiry only from a response it got itself.
            if grant.expires_at is not None:
                self.context.token_expiry_time = grant.expires_at.timestamp() - REFRESH_MARGIN

    async def no_sign_in(url: str) -> None:
        from o_runtime.mcp_client import McpUnauthorized

        raise McpUnauthorized(SIGN_IN_AGAIN)

    async def no_callback() -> Any:
        raise AssertionError("unreachable: no_sign_in raises first")

    # (A refresh does not send the redirect URI; the registration's is kept for form.)
    redirect = str(client.redirect_uris[0]) if client.redirect_uris else "http://localhost/"
    auth = Recorded(
        grant.server_url,
        client_metadata(redirect),
        Storage(),
        redirect_handler=no_sign_in,
        callback_handler=no_callback,
    )
    if grant.oauth_metadata:
        # Where to refresh: the endpoint the sign-in found, not the SDK's guess (origin/token).
        auth.context.oauth_metadata = OAuthMetadata.model_validate(grant.oauth_metadata)
    return auth


def client_metadata(redirect_uri: str) -> Any:
    """How O registers with an authorization server (RFC 7591)."""
    from mcp.shared.auth import OAuthClientMetadata

    return OAuthClientMetadata(
        redirect_uris=[redirect_uri],
        client_name="O",
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="client_secret_post",
    )


def token_json(tokens: Any) -> str:
    """An mcp OAuthToken as the log seals it."""
    return str(tokens.model_dump_json())


def metadata_json(metadata: Any) -> dict[str, Any] | None:
    if metadata is None:
        return None
    loaded: dict[str, Any] = json.loads(metadata.model_dump_json(exclude_none=True))
    return loaded


async def grant_for(pool: Any, server_url: str | None) -> OAuthGrant | None:
    """The newest authorized sign-in to `server_url` (None: it has none)."""
    if not server_url:
        return None
    row = await pool.fetchrow(GRANT_SQL, server_url)
    return OAuthGrant.from_row(row) if row is not None else None


# Waits until the registry's projection shows a log position.
Visible = Callable[[int], Awaitable[None]]


def recorder(eventlog: Any, producer: str, visible: Visible) -> RecordRefresh:
    """Records the tokens a call refreshed, sealed, on the sign-in's subject, and waits
    until the projection shows them: the next call reads them there (the refresh token
    before them may be spent)."""
    from o_contracts import subjects
    from o_contracts.envelope import Envelope
    from o_contracts.events import McpOAuthTokensRefreshed

    async def record(
        session_id: str, tokens: str, expires_at: datetime | None, scope: str | None
    ) -> None:
        # No expected sequence: two calls refreshing at once both got valid tokens, and
        # the later record is the one the next call takes.
        event = McpOAuthTokensRefreshed(
            session_id=session_id, encrypted_tokens=seal(tokens), expires_at=expires_at, scope=scope
        )
        appended = await eventlog.append(
            subjects.mcp_oauth_subject(session_id),
            Envelope.wrap(event, aggregate_id=session_id, producer=producer),
        )
        await visible(appended.seq)

    return record


async def signed_in(
    pool: Any, eventlog: Any, producer: str, server_url: str | None, visible: Visible
) -> SignedIn | None:
    """What a call to `server_url` carries for its sign-in, if it has one."""
    grant = await grant_for(pool, server_url)
    return SignedIn(grant, recorder(eventlog, producer, visible)) if grant is not None else None
