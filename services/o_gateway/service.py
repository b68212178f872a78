"""The gateway process: the HTTP API, the registry projections, and completion callbacks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn

from o_contracts import subjects
from o_contracts.commands import DeliverCallback
from o_gateway.app import create_app
from o_gateway.callbacks.deliveries import CallbackDeliveries
from o_gateway.callbacks.projection import callbacks
from o_gateway.groups_projection import groups
from o_gateway.guards import JsonHttpToolsProtocol
from o_gateway.identities_projection import identities
from o_gateway.mcp_projection import mcp_servers
from o_gateway.projections import agents
from o_gateway.providers_projection import providers
from o_gateway.read_fence import ReadFence
from o_gateway.sandbox_configs_projection import sandbox_configs
from o_gateway.settings import GatewaySettings
from o_gateway.state import Gateway
from o_gateway.stopping import SHUTDOWN_GRACE
from o_gateway.tools_projection import tools
from o_runtime.commands import CommandConsumer
from o_runtime.env import Env
from o_runtime.service import Service

log = logging.getLogger(__name__)

# Deliveries in the consumer's hands at once across replicas, most of them waiting for
# their next attempt (JetStream counts a nacked-with-delay message as pending).
MAX_WAITING_DELIVERIES = 100_000


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the Service owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listening_socket(host: str, port: int) -> socket.socket:
    """The HTTP socket with SO_REUSEPORT: several gateway processes on one port, the
    kernel spreading connections among them (O_HTTP_REUSE_PORT; the supervisor sets it
    for O_GATEWAY_REPLICAS > 1). Off by default: a second system started on a port in use
    fails to bind instead of taking half its connections."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    return sock


class GatewayService(Service):
    name = "gateway"
    fence: ReadFence | None = None
    # The gateway samples the dead letters kept (o_runtime/sampling.py).
    samples_dead_letters = True

    def configure(self, env: Env) -> None:
        self.config = GatewaySettings.from_env(env)

    async def setup(self) -> None:
        fence = None
        if self.config.read_cache_bytes:
            fence = ReadFence(self.settings.database_url, self.watcher)
            await fence.start()
        self.fence = fence
        self.gateway = Gateway(
            self.eventlog, self.pool, self.watcher, self.config, operated=self, fence=fence
        )
        self.project(agents)
        self.project(tools)
        self.project(mcp_servers)
        self.project(providers)
        self.project(identities)
        self.project(sandbox_configs)
        self.project(groups)
        self.project(callbacks)
        self.deliver_callbacks()

    def deliver_callbacks(self) -> None:
        """Completion callbacks (docs/callbacks.md): the executor asks for each as its run
        ends, a command consumer delivers (retries are the command again, after a delay)."""
        settings = self.config.callbacks
        deliveries = CallbackDeliveries(self.gateway)
        self.consume(
            CommandConsumer(
                self.eventlog,
                "gateway-callbacks",
                subjects.CALLBACK_COMMANDS,
                {DeliverCallback: deliveries.deliver},
                ack_wait=settings.ack_wait,
                concurrency=settings.concurrency,
                # A delivery waiting for its next attempt stays pending in the consumer:
                # those may be many (receivers down) without holding up the others.
                max_ack_pending=MAX_WAITING_DELIVERIES,
            )
        )

    async def started(self) -> None:
        gateway = self.gateway
        app = create_app(gateway, self.config)
        config = uvicorn.Config(
            app,
            host=self.config.http_host,
            port=self.config.http_port,
            log_level="warning",
            lifespan="off",
            # A request uvicorn cannot parse is a JSON 400 too.
            http=JsonHttpToolsProtocol,
            # Then the requests still going are cancelled, and answer 503 (stopping.py).
            timeout_graceful_shutdown=SHUTDOWN_GRACE,
        )
        self.http = _Server(config)
        sockets = None
        if self.config.http_reuse_port:
            sockets = [listening_socket(config.host, config.port)]
        self.http_task = asyncio.create_task(self.http.serve(sockets=sockets))
        log.info("gateway listening on %s:%s", config.host, config.port)

    async def stopping(self) -> None:
        self.gateway.stopping = True
        self.http.should_exit = True
        await self.http_task
        if self.fence is not None:
            await self.fence.stop()
