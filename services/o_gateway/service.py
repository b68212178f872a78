"""The gateway process: the HTTP API plus the agent-registry projection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import uvicorn

from o_gateway.app import create_app
from o_gateway.groups_projection import groups
from o_gateway.guards import JsonHttpToolsProtocol
from o_gateway.mcp_projection import mcp_servers
from o_gateway.projections import agents
from o_gateway.settings import GatewaySettings
from o_gateway.state import Gateway
from o_gateway.tools_projection import tools
from o_runtime.env import Env
from o_runtime.service import Service

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the Service owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class GatewayService(Service):
    name = "gateway"
    # The gateway samples the dead letters kept (o_runtime/sampling.py).
    samples_dead_letters = True

    def configure(self, env: Env) -> None:
        self.config = GatewaySettings.from_env(env)

    async def setup(self) -> None:
        self.project(agents)
        self.project(tools)
        self.project(mcp_servers)
        self.project(groups)

    async def started(self) -> None:
        gateway = Gateway(self.eventlog, self.pool, self.watcher, self.config, operated=self)
        app = create_app(gateway, self.config)
        config = uvicorn.Config(
            app,
            host=self.config.http_host,
            port=self.config.http_port,
            log_level="warning",
            lifespan="off",
            # A request uvicorn cannot parse is a JSON 400 too.
            http=JsonHttpToolsProtocol,
        )
        self.http = _Server(config)
        self.http_task = asyncio.create_task(self.http.serve())
        log.info("gateway listening on %s:%s", config.host, config.port)

    async def stopping(self) -> None:
        self.http.should_exit = True
        await self.http_task
