"""The gateway's settings, read once at start (o_runtime/env.py validates them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from o_contracts import limits
from o_gateway.callbacks.settings import CallbackSettings
from o_runtime.env import Env


@dataclass(frozen=True)
class GatewaySettings:
    http_host: str = "127.0.0.1"
    http_port: int = 8283
    # With a key, every route but health needs `Authorization: Bearer <key>`.
    api_key: str | None = None
    # O_OPEN_DOCS=1: the docs and /openapi.json are open without the key.
    open_docs: bool = False
    # A request body larger than this is refused (413) without being read.
    max_body_bytes: int = limits.DEFAULT_MAX_BODY_BYTES
    # While a streamed run sends nothing, a ping this often keeps proxies from
    # closing the stream.
    stream_ping_seconds: float = 10.0
    # MCP servers at loopback, private or link-local addresses are refused (as Letta
    # refuses them: the gateway would otherwise reach into the operator's network on a
    # client's word); an operator whose MCP servers live there allows them.
    mcp_allow_private_urls: bool = False
    # How long a sleep-time primary's reply waits for the evolution service to count its
    # turn (to name the companion runs it started); past it, the reply names none.
    sleeptime_turn_wait: float = 2.0
    # Completion callbacks: signing secret, allowed targets, timeouts, backoff.
    callbacks: CallbackSettings = field(default_factory=CallbackSettings)

    @classmethod
    def from_env(cls, env: Env) -> GatewaySettings:
        return cls(
            http_host=env.text("O_HTTP_HOST", "127.0.0.1"),
            http_port=env.integer("O_HTTP_PORT", 8283, minimum=0),
            api_key=env.optional("O_API_KEY"),
            open_docs=env.flag("O_OPEN_DOCS"),
            max_body_bytes=env.integer(
                "O_MAX_BODY_BYTES", limits.DEFAULT_MAX_BODY_BYTES, minimum=1024
            ),
            stream_ping_seconds=env.number("O_STREAM_PING_SECONDS", 10.0, minimum=0.01),
            mcp_allow_private_urls=env.flag("O_MCP_ALLOW_PRIVATE_URLS"),
            sleeptime_turn_wait=env.number("O_SLEEPTIME_TURN_WAIT", 2.0, minimum=0.0),
            callbacks=CallbackSettings.from_env(env),
        )
