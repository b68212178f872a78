"""The gateway's HTTP application: Letta v1 under /v1, errors as {"detail": ...}."""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from opentelemetry import trace

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

    @app.middleware("http")
    async def traced(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        # The root of a user message's trace; NATS headers carry it onwards.
        with tracer.start_as_current_span(
            f"{request.method} {request.url.path}", kind=trace.SpanKind.SERVER
        ):
            return await call_next(request)

    api_key = os.environ.get("O_API_KEY")
    if api_key:

        @app.middleware("http")
        async def authenticate(
            request: Request, call_next: Callable[[Request], Awaitable[Response]]
        ) -> Response:
            if not request.url.path.startswith(OPEN_PATHS):
                header = request.headers.get("authorization", "")
                token = header.removeprefix("Bearer ").strip()
                if not hmac.compare_digest(token.encode(), api_key.encode()):
                    return JSONResponse({"detail": "invalid or missing API key"}, status_code=401)
            return await call_next(request)

    return app
