"""The gateway's HTTP application: Letta v1 under /v1, errors as {"detail": ...}."""

from __future__ import annotations

import hmac
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from opentelemetry import trace
from starlette.datastructures import MutableHeaders
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from o_contracts.ids import InvalidId
from o_gateway import openapi
from o_gateway.guards import RETRY_AFTER_SECONDS, InputLimits, install_error_handlers
from o_gateway.render import VERSION
from o_gateway.routes import (
    agent_folders,
    agent_tools,
    agents,
    all_messages,
    archival,
    blocks,
    context,
    conversations,
    evolution,
    folders,
    generate,
    groups,
    health,
    mcp_legacy,
    mcp_servers,
    messages,
    models,
    runs,
    schedules,
    steps,
    tags,
    tools,
)
from o_gateway.routes.messages import ConversationBusy
from o_gateway.settings import GatewaySettings
from o_gateway.state import Gateway
from o_runtime.commands import CommandTimeout
from o_runtime.env import Env
from o_runtime.eventlog import AppendRejected
from o_runtime.tracing import tracer
from o_runtime.waiting import ProjectionLag

# Answered without the API key: health (probes), and with O_OPEN_DOCS=1 the docs.
HEALTH_PATH = "/v1/health"
DOC_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})


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
    """With an API key configured, every path but health needs `Authorization: Bearer <key>`
    (the docs and the OpenAPI document too, unless `open_docs`). Anything else is a 401
    with `WWW-Authenticate: Bearer`."""

    def __init__(self, app: ASGIApp, api_key: str | None, open_docs: bool = False) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode() if api_key else None
        self.open_docs = open_docs

    def is_open(self, path: str) -> bool:
        if path == HEALTH_PATH or path.startswith(HEALTH_PATH + "/"):
            return True
        return self.open_docs and path in DOC_PATHS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.expected is None or scope["type"] != "http" or self.is_open(scope["path"]):
            await self.app(scope, receive, send)
            return
        header = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value
                break
        # The scheme is case-insensitive (RFC 9110); the key is compared in constant time.
        scheme, _, token = header.partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(
            b"Bearer " + token, self.expected
        ):
            response = JSONResponse(
                {"detail": "invalid or missing API key: send `Authorization: Bearer <key>`"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(gateway: Gateway, settings: GatewaySettings | None = None) -> FastAPI:
    """The HTTP app; `settings` default to the environment's (read now, once)."""
    settings = settings or GatewaySettings.from_env(Env())
    app = FastAPI(title="O", version=VERSION, description="Letta v1 API, event-sourced")
    app.state.gateway = gateway
    for module in (
        health,
        agents,
        blocks,
        messages,
        conversations,
        generate,
        context,
        models,
        runs,
        tools,
        agent_tools,
        archival,
        mcp_servers,
        mcp_legacy,
        groups,
        evolution,
        folders,
        agent_folders,
        schedules,
    ):
        app.include_router(module.router)
    for module in (all_messages, steps, tags):
        app.include_router(module.router)

    @app.exception_handler(AppendRejected)
    async def rejected(_: Request, exc: AppendRejected) -> JSONResponse:
        retry = {"Retry-After": str(RETRY_AFTER_SECONDS)} if exc.status == 503 else None
        return JSONResponse({"detail": exc.reason}, status_code=exc.status, headers=retry)

    @app.exception_handler(ConversationBusy)
    async def busy(_: Request, exc: ConversationBusy) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "run_id": exc.run_id}, status_code=409)

    @app.exception_handler(InvalidId)
    async def invalid_id(_: Request, exc: InvalidId) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    @app.exception_handler(ProjectionLag)
    async def lagging(_: Request, exc: ProjectionLag) -> JSONResponse:
        return JSONResponse(
            {"detail": f"the change was accepted but is not visible yet: {exc}"},
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )

    @app.exception_handler(CommandTimeout)
    async def timed_out(_: Request, exc: CommandTimeout) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=504)

    install_error_handlers(app)
    openapi.install(app, secured=settings.api_key is not None)
    # Plain ASGI middleware: @app.middleware("http") (Starlette's
    # BaseHTTPMiddleware) costs a task and two memory streams per request.
    # The last added runs first: Instrumented, CORS, Authenticated, InputLimits. CORS
    # answers a browser's preflight before authentication (a preflight carries no key)
    # and marks refusals too, so a browser app can read why it was refused.
    app.add_middleware(
        InputLimits,
        max_body_bytes=settings.max_body_bytes,
        max_file_bytes=settings.max_file_bytes,
    )
    app.add_middleware(Authenticated, api_key=settings.api_key, open_docs=settings.open_docs)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(settings.cors_origins),
        allow_credentials=True,
        allow_methods=["*"],
        allow_headers=["*"],
    )
    app.add_middleware(Instrumented)
    return app
