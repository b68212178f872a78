"""The gateway's settings, read once at start (o_runtime/env.py validates them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from o_contracts import limits
from o_gateway.callbacks.settings import CallbackSettings
from o_runtime.env import Env

# The browser origins Letta's server allows (its settings' defaults and the ADE at
# app.letta.com), so Letta's browser apps reach O as they reach Letta.
LETTA_ORIGINS = (
    "http://letta.localhost",
    "http://localhost:8283",
    "http://localhost:8083",
    "http://localhost:3000",
    "http://localhost:4200",
    "https://app.letta.com",
)


DEFAULT_MAX_FILE_BYTES = 50 * 1024 * 1024
DEFAULT_READ_CACHE_BYTES = 32 * 1024 * 1024


def cors_origins(env: Env) -> tuple[str, ...]:
    """O_CORS_ORIGINS (comma-separated) in place of Letta's defaults, and Letta's own
    ACCEPTABLE_ORIGINS added to either, as Letta adds it."""
    chosen = env.optional("O_CORS_ORIGINS")
    base = tuple(_origins(chosen)) if chosen is not None else LETTA_ORIGINS
    return base + tuple(_origins(env.optional("ACCEPTABLE_ORIGINS") or ""))


def _origins(raw: str) -> list[str]:
    return [o.strip().rstrip("/") for o in raw.split(",") if o.strip()]


@dataclass(frozen=True)
class GatewaySettings:
    http_host: str = "127.0.0.1"
    http_port: int = 8283
    # O_HTTP_REUSE_PORT=1: bind with SO_REUSEPORT, so several gateway processes share the
    # port (the supervisor sets it for O_GATEWAY_REPLICAS > 1; docs/throughput.md).
    http_reuse_port: bool = False
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
    # A provider registered through the API may have a base_url inside this network
    # (a local model server): the gateway and the executor call it.
    providers_allow_private_urls: bool = False
    # How long a sleep-time primary's reply waits for the evolution service to count its
    # turn (to name the companion runs it started); past it, the reply names none.
    sleeptime_turn_wait: float = 2.0
    # Browser origins that may call the API (CORS, with credentials, any method and header).
    cors_origins: tuple[str, ...] = field(default=LETTA_ORIGINS)
    # Wall-clock limit of a tool the API runs directly (/v1/tools/run, an agent's tool
    # run by name): the executor's limit per tool call, O_TOOL_TIMEOUT.
    tool_timeout: float = 30.0
    # The console at /console (docs/console.md); O_CONSOLE=0 turns it off (a 404).
    console: bool = True
    # A file uploaded to a folder may be this large (Letta's file processor takes 50 MiB);
    # more is a 413 before the upload is read.
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    # Completion callbacks: signing secret, allowed targets, timeouts, backoff.
    callbacks: CallbackSettings = field(default_factory=CallbackSettings)
    # The hot reads' kept answers (hot_reads.py, docs/throughput.md): at most this many
    # bytes of them; O_READ_CACHE_BYTES=0 renders every read.
    read_cache_bytes: int = DEFAULT_READ_CACHE_BYTES
    # The address clients and browsers reach O by (behind a proxy or ingress), for the
    # URLs O hands out: an MCP server's OAuth callback. Unset: the address of the request.
    public_url: str | None = None
    # How long an MCP server's OAuth sign-in waits for the user (Letta: 300 s).
    mcp_oauth_wait: float = 300.0

    @classmethod
    def from_env(cls, env: Env) -> GatewaySettings:
        return cls(
            http_host=env.text("O_HTTP_HOST", "127.0.0.1"),
            http_port=env.integer("O_HTTP_PORT", 8283, minimum=0),
            http_reuse_port=env.flag("O_HTTP_REUSE_PORT"),
            api_key=env.optional("O_API_KEY"),
            open_docs=env.flag("O_OPEN_DOCS"),
            max_body_bytes=env.integer(
                "O_MAX_BODY_BYTES", limits.DEFAULT_MAX_BODY_BYTES, minimum=1024
            ),
            stream_ping_seconds=env.number("O_STREAM_PING_SECONDS", 10.0, minimum=0.01),
            mcp_allow_private_urls=env.flag("O_MCP_ALLOW_PRIVATE_URLS"),
            providers_allow_private_urls=env.flag("O_PROVIDERS_ALLOW_PRIVATE_URLS"),
            sleeptime_turn_wait=env.number("O_SLEEPTIME_TURN_WAIT", 2.0, minimum=0.0),
            cors_origins=cors_origins(env),
            tool_timeout=env.number("O_TOOL_TIMEOUT", 30.0, minimum=0.1),
            max_file_bytes=env.integer("O_MAX_FILE_BYTES", DEFAULT_MAX_FILE_BYTES, minimum=1),
            callbacks=CallbackSettings.from_env(env),
            console=env.flag("O_CONSOLE") if env.optional("O_CONSOLE") is not None else True,
            read_cache_bytes=env.integer("O_READ_CACHE_BYTES", DEFAULT_READ_CACHE_BYTES, minimum=0),
            # (LETTA_AGENTS_ENDPOINT: Letta's name for it, honoured for its operators.)
            public_url=env.optional("O_PUBLIC_URL") or env.optional("LETTA_AGENTS_ENDPOINT"),
            mcp_oauth_wait=env.number("O_MCP_OAUTH_WAIT", 300.0, minimum=1.0),
        )
