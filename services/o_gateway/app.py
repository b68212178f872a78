"""The gateway's HTTP application: Letta v1 under /v1, errors as {"detail": ...}."""

from __future__ import annotations

import hmac
import os
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from opentelemetry import trace
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from o_contracts.ids import InvalidId
from o_gateway.render import VERSION
from o_gateway.routes import (
    agent_tools,
    agents,
    archival,
    blocks,
    health,
    messages,
    models,
    runs,
    tools,
)
from o_gateway.state import Gateway
from o_runtime.commands import CommandTimeout
from o_runtime.eventlog import AppendRejected
from o_runtime.tracing import tracer
from o_runtime.waiting import ProjectionLag

OPEN_PATHS = ("/v1/health", "/docs", "/openapi.json")


class Instrumented:
    """Per request: the root span of a user message's trace (NATS headers carry it onwards),
    and `Server-Timing: app;dur=<ms>` on the response: from the request reaching the
    application to its response starting, so clients (and bench/agent_loop.py) can tell the
    server's share of a request's time from the network's and their own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                took = (time.perf_counter() - start) * 1000
                headers = MutableHeaders(scope=message)
                headers.append("server-timing", f"app;dur={took:.2f}")
            await send(message)

        name = f"{scope['method']} {scope['path']}"
        with tracer.start_as_current_span(name, kind=trace.SpanKind.SERVER):
            await self.app(scope, receive, timed)


class Authenticated:
    """With an API key configured, every path but OPEN_PATHS needs `Bearer <key>`."""

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.api_key is not None
            and scope["type"] == "http"
            and not scope["path"].startswith(OPEN_PATHS)
        ):
            header = Headers(scope=scope).get("authorization", "")
            token = header.removeprefix("Bearer ").strip()
            if not hmac.compare_digest(token.encode(), self.api_key):
                response = JSONResponse({"detail": "invalid or missing API key"}, status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(gateway: Gateway) -> FastAPI:
    app = FastAPI(title="O", version=VERSION, description="Letta v1 API, event-sourced")
    app.state.gateway = gateway
    for module in (health, agents, blocks, messages, models, runs, tools, agent_tools, archival):
        app.include_router(module.router)

    @app.exception_handler(AppendRejected)
    async def rejected(_: Request, exc: AppendRejected) -> JSONResponse:
        return JSONResponse({"detail": exc.reason}, status_code=exc.status)

    @app.exception_handler(InvalidId)
    async def invalid_id(_: Request, exc: InvalidId) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    @app.exception_handler(ProjectionLag)
    async def lagging(_: Request, exc: ProjectionLag) -> JSONResponse:
        return JSONResponse(
            {"detail": f"the change was accepted but is not visible yet: {exc}"}, status_code=503
        )

    @app.exception_handler(CommandTimeout)
    async def timed_out(_: Request, exc: CommandTimeout) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=504)

    # Plain ASGI middleware: @app.middleware("http") (Starlette's
    # BaseHTTPMiddleware) costs a task and two memory streams per request.
    app.add_middleware(Authenticated, api_key=os.environ.get("O_API_KEY"))
    app.add_middleware(Instrumented)
    return app
