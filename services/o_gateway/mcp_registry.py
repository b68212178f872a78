"""MCP servers as the gateway reads them: typed, secrets decrypted, rendered as Letta does."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from fastapi import HTTPException

from o_contracts.events import McpServerCreated
from o_contracts.mcp_stdio import StdioServerSpec
from o_contracts.projection_names import MCP_SERVERS
from o_gateway.commands import PRODUCER
from o_gateway.mcp_schemas import HttpConfig, StdioConfig
from o_gateway.state import Gateway
from o_runtime import mcp_oauth, tool_secrets
from o_runtime.mcp_client import McpEndpoint, http_headers
from o_runtime.mcp_oauth import SignedIn
from o_runtime.mcp_stdio_relay import NatsStdioRelay
from o_runtime.tool_secrets import REDACTED, SecretsUnavailable

# Names that always mean "inside": refused like private addresses.
_INTERNAL_NAMES = ("localhost", "metadata.google.internal")
_INTERNAL_SUFFIXES = (".local", ".localdomain", ".home.arpa", ".svc", ".internal")


def refused_address(url: str, allow_private: bool, field: str = "server_url") -> str | None:
    """Why O may not send requests to `url` (None: it may): not an http(s) URL with a
    host, or an internal one unless the operator allows it.

    Like Letta, a hostname is not resolved here (a name may resolve differently at call
    time); only names and literal addresses that are internal by themselves are refused.
    """
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return f"{field} must be an http:// or https:// URL, got '{url}'"
    if allow_private:
        return None
    host = parsed.hostname.rstrip(".").lower()
    if host in _INTERNAL_NAMES or host.endswith(_INTERNAL_SUFFIXES):
        return f"{field} points inside this network: {host}"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if not address.is_global:
        return f"{field} is not a public address: {host}"
    return None


def check_url(url: str, allow_private: bool, field: str = "server_url") -> None:
    """422 for a URL O may not call (refused_address)."""
    reason = refused_address(url, allow_private, field)
    if reason is not None:
        raise HTTPException(422, reason)


def encrypt(values: dict[str, str] | None) -> dict[str, str] | None:
    if values is None:
        return None
    try:
        return tool_secrets.encrypt_all(values)
    except SecretsUnavailable as exc:
        raise HTTPException(400, str(exc)) from exc


def encrypt_one(value: str | None) -> str | None:
    if value is None:
        return None
    return (encrypt({"v": value}) or {})["v"]


def server_created(
    server_id: str,
    name: str,
    server_type: str,
    config: StdioConfig | HttpConfig,
    *,
    allow_private_urls: bool,
) -> McpServerCreated:
    """The event that registers a server (by the API or an agent file): its secrets
    encrypted, an HTTP server's address checked against the private-address policy."""
    if isinstance(config, StdioConfig):
        return McpServerCreated(
            mcp_server_id=server_id,
            server_name=name,
            server_type="stdio",
            command=config.command,
            args=config.args,
            encrypted_env=encrypt(config.env),
        )
    check_url(config.server_url, allow_private_urls)
    return McpServerCreated(
        mcp_server_id=server_id,
        server_name=name,
        server_type=server_type,
        server_url=config.server_url,
        auth_header=config.auth_header,
        encrypted_auth_token=encrypt_one(config.auth_token),
        encrypted_custom_headers=encrypt(config.custom_headers),
    )


def _decrypt(values: dict[str, str] | None) -> tuple[dict[str, str] | None, bool]:
    # A value that no longer decrypts (the key was rotated) shows as redacted; calling
    # the server then fails with the reason (McpServer.secrets_readable).
    if values is None:
        return None, True
    try:
        return tool_secrets.decrypt_all(values), True
    except SecretsUnavailable:
        return dict.fromkeys(values, REDACTED), False


@dataclass(frozen=True)
class McpServer:
    id: str
    server_name: str
    server_type: str
    command: str | None
    args: list[str]
    server_url: str | None
    auth_header: str | None
    auth_token: str | None
    custom_headers: dict[str, str] | None
    env: dict[str, str] | None
    # As recorded: the sandbox, not the gateway, decrypts it to start the server.
    encrypted_env: dict[str, str] | None
    last_seq: int
    secrets_readable: bool

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> McpServer:
        token, token_ok = _decrypt(
            {"t": row["encrypted_auth_token"]} if row["encrypted_auth_token"] else None
        )
        headers, headers_ok = _decrypt(row["encrypted_custom_headers"])
        env, env_ok = _decrypt(row["encrypted_env"])
        return cls(
            id=row["id"],
            server_name=row["server_name"],
            server_type=row["server_type"],
            command=row["command"],
            args=list(row["args"] or []),
            server_url=row["server_url"],
            auth_header=row["auth_header"],
            auth_token=token["t"] if token else None,
            custom_headers=headers,
            env=env,
            encrypted_env=row["encrypted_env"],
            last_seq=row["last_seq"],
            secrets_readable=token_ok and headers_ok and env_ok,
        )

    def endpoint(self, oauth: SignedIn | None = None) -> McpEndpoint:
        stdio = None
        if self.server_type == "stdio":
            stdio = StdioServerSpec(
                mcp_server_id=self.id,
                command=self.command or "",
                args=self.args,
                encrypted_env=self.encrypted_env or {},
            )
        return McpEndpoint(
            self.server_type,
            self.server_url,
            http_headers(self.auth_header, self.auth_token, self.custom_headers),
            self.secrets_readable,
            stdio,
            oauth,
        )

    def render(self) -> dict[str, Any]:
        # Letta answers with the secrets in plaintext: the client that set them reads
        # them back to edit them. The log and the projection hold only ciphertext.
        base: dict[str, Any] = {
            "id": self.id,
            "server_name": self.server_name,
            "mcp_server_type": self.server_type,
        }
        if self.server_type == "stdio":
            return {**base, "command": self.command, "args": self.args, "env": self.env}
        return {
            **base,
            "server_url": self.server_url,
            "auth_header": self.auth_header,
            "auth_token": self.auth_token,
            "custom_headers": self.custom_headers,
        }


async def signed_in(gw: Gateway, server_url: str | None) -> SignedIn | None:
    """The OAuth sign-in calls to `server_url` carry, if it has one (o_runtime/mcp_oauth.py)."""

    async def visible(seq: int) -> None:
        await gw.visible(seq, MCP_SERVERS)

    return await mcp_oauth.signed_in(gw.pool, gw.eventlog, PRODUCER, server_url, visible)


async def endpoint(gw: Gateway, server: McpServer) -> McpEndpoint:
    """Where the server is and what its calls carry: its OAuth sign-in's tokens too, if
    its address has one (refreshed ones recorded: o_runtime/mcp_oauth.py)."""
    if server.server_type == "stdio":
        return server.endpoint()
    return server.endpoint(await signed_in(gw, server.server_url))


def relay(gw: Gateway) -> NatsStdioRelay:
    """How the gateway reaches stdio servers: through the tool sandbox that runs them."""
    return NatsStdioRelay(gw.eventlog.nc)


async def server_by_id(gw: Gateway, mcp_server_id: str) -> McpServer:
    row = await gw.pool.fetchrow("SELECT * FROM mcp_servers WHERE id = $1", mcp_server_id)
    if row is None:
        raise HTTPException(404, f"MCP server {mcp_server_id} not found")
    return McpServer.from_row(dict(row))


async def server_id_by_name(gw: Gateway, name: str) -> str | None:
    found: str | None = await gw.pool.fetchval(
        "SELECT id FROM mcp_servers WHERE server_name = $1 LIMIT 1", name
    )
    return found
