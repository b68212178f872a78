"""The gateway's HTTP application: Letta v1 under /v1, errors as {"detail": ...}."""

from __future__ import annotations

import hmac
import time

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from opentelemetry import propagate, trace
from starlette.datastructures import MutableHeaders
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from o_contracts.ids import InvalidId
from o_gateway import openapi
from o_gateway.guards import RETRY_AFTER_SECONDS, InputLimits, install_error_handlers
from o_gateway.hot_reads import HotReads
from o_gateway.mcp_sign_in import CALLBACK_PATH as MCP_OAUTH_CALLBACK
from o_gateway.render import VERSION
from o_gateway.routes import (
    agent_files,
    agent_folders,
    agent_tools,
    agents,
    all_messages,
    archival,
    archives,
    blocks,
    chat_completions,
    console,
    context,
    conversations,
    embeddings,
    evolution,
    folders,
    generate,
    groups,
    health,
    identities,
    mcp_legacy,
    mcp_servers,
    messages,
    models,
    operations,
    previews,
    providers,
    runs,
    sandbox_configs,
    schedules,
    steps,
    system_status,
    tags,
    timeline,
    tool_actions,
    tool_generation,
    tools,
    traces,
)
from o_gateway.routes.messages import ConversationBusy
from o_gateway.settings import GatewaySettings
from o_gateway.state import Gateway
from o_gateway.stopping import AnswerWhileStopping
from o_runtime.commands import CommandTimeout
from o_runtime.env import Env
from o_runtime.eventlog import AppendRejected
from o_runtime.instruments import measured
from o_runtime.tracing import recording, tracer
from o_runtime.waiting import ProjectionLag

# Answered without the API key: health (probes), metrics (scrapers), the console's files
# (they hold no data: the page asks for the key and sends it with every API call), and with
# O_OPEN_DOCS=1 the docs.
HEALTH_PATH = "/v1/health"
# Letta's readiness route: open as health is (a load balancer's probe has no key).
READY_PATH = "/v1/ready"
DOC_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})


def route_template(scope: Scope) -> str:
    """The matched route's template (`/v1/agents/{agent_id}`), never the path itself, so
    metrics stay bounded; one form for the two each route answers (with and without a
    trailing slash). Empty when nothing matched."""
    route = scope.get("route")
    path: str = getattr(route, "path", "") or ""
    return path.rstrip("/") or path


class Instrumented:
    """Per request: the root span of a user message's trace (NATS headers carry it onwards;
    a caller's `traceparent` is continued), `http.server.request.duration` by route
    template, method and status, and `Server-Timing: app;dur=<ms>` on the response: from the
    request reaching the application to its response starting, so clients (and
    bench/agent_loop.py) can tell the server's share of a request's time from the
    network's and their own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def timed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                took = (time.perf_counter() - start) * 1000
                headers = MutableHeaders(scope=message)
                headers.append("server-timing", f"app;dur={took:.2f}")
            await send(message)

        method = scope["method"]
        if not recording():
            try:
                await self.app(scope, receive, timed)
            finally:
                self._measure(scope, method, status, start)
            return
        caller = propagate.extract(
            {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        )
        with tracer.start_as_current_span(
            method,
            context=caller,
            kind=trace.SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": scope["path"]},
        ) as span:
            try:
                await self.app(scope, receive, timed)
            finally:
                route = self._measure(scope, method, status, start)
                if route:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(trace.StatusCode.ERROR)

    @staticmethod
    def _measure(scope: Scope, method: str, status: int, start: float) -> str:
        route = route_template(scope)
        measured.http_duration.record(
            time.perf_counter() - start,
            {
                "http.request.method": method,
                "http.route": route,
                "http.response.status_code": status,
            },
        )
        return route


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
        if path in (READY_PATH, READY_PATH + "/"):
            return True
        if path == operations.METRICS_PATH:
            return True
        if path == MCP_OAUTH_CALLBACK:
            # A browser back from an authorization server: its sign-in's state admits it.
            return True
        if path == console.CONSOLE_PATH or path.startswith(console.CONSOLE_PATH + "/"):
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


def add_routes(app: FastAPI, router: APIRouter) -> None:
    """`router`'s routes as the app's own, in their order.

    Not `include_router`: FastAPI (0.16x) keeps an included router whole and, at the first
    request routed through it, builds each of its routes a second time for the inclusion's
    context (~1.4 s of the gateway's first request, for ~470 routes). O's routers have no
    prefix or dependencies of their own (their tags are on each route already), so the
    routes are the same without it."""
    app.router.routes.extend(router.routes)


def create_app(gateway: Gateway, settings: GatewaySettings | None = None) -> FastAPI:
    """The HTTP app; `settings` default to the environment's (read now, once)."""
    settings = settings or GatewaySettings.from_env(Env())
    app = FastAPI(
        title="O",
        version=VERSION,
        description="Letta v1 API, event-sourced",
        # FastAPI's own OpenTelemetry (a span per request and per dependency, its own
        # http.server.request.duration) stays off: Instrumented does the request's span and
        # metric, by route template, and nothing else costs a request anything.
        telemetry={
            "tracing": False,
            "metrics": False,
            "logs": False,
            "operation_spans": False,
            "auto_configure": False,
        },
    )
    app.state.gateway = gateway
    for module in (
        health,
        operations,
        agent_files,
        agents,
        blocks,
        messages,
        chat_completions,
        conversations,
        generate,
        context,
        previews,
        models,
        providers,
        identities,
        sandbox_configs,
        runs,
        tool_actions,
        tool_generation,
        tools,
        agent_tools,
        archival,
        archives,
        mcp_servers,
        mcp_legacy,
        groups,
        evolution,
        folders,
        agent_folders,
        schedules,
    ):
        add_routes(app, module.router)
    for module in (all_messages, steps, traces, embeddings, tags, timeline, system_status):
        add_routes(app, module.router)
    if settings.console:
        add_routes(app, console.router)

    @app.exception_handler(AppendRejected)
    async def rejected(_: Request, exc: AppendRejected) -> JSONResponse:
        retry = {"Retry-After": str(RETRY_AFTER_SECONDS)} if exc.status == 503 else None
        return JSONResponse({"detail": exc.reason}, status_code=exc.status, headers=retry)

    @app.exception_handler(ConversationBusy)
    async def busy(_: Request, exc: ConversationBusy) -> JSONResponse:
        # Letta's clients (Stainless-made, Python and TypeScript) retry a 409 twice within
        # about 1.5 s unless told not to: against a run of O's speed a retry then lands after
        # the run and sends the message anyway, so whether a client sees "busy" would depend
        # on how fast the model answered. Told, it sees it at once, every time, and decides
        # itself (docs/letta-compatibility.md).
        return JSONResponse(
            {"detail": str(exc), "run_id": exc.run_id},
            status_code=409,
            headers={"x-should-retry": "false"},
        )

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
    # The last added runs first: Instrumented, CORS, AnswerWhileStopping, Authenticated,
    # InputLimits, HotReads.
    # CORS answers a browser's preflight before authentication (a preflight carries no
    # key) and marks refusals too, so a browser app can read why it was refused. HotReads
    # sends kept answers of the hot reads, so only what passed the others.
    # (Tests build the app without a gateway: then nothing is kept.)
    fence = getattr(gateway, "fence", None)
    app.add_middleware(HotReads, fence=fence, budget=settings.read_cache_bytes)
    app.add_middleware(
        InputLimits,
        max_body_bytes=settings.max_body_bytes,
        max_file_bytes=settings.max_file_bytes,
    )
    app.add_middleware(Authenticated, api_key=settings.api_key, open_docs=settings.open_docs)
    app.add_middleware(
        AnswerWhileStopping, stopping=lambda: bool(getattr(gateway, "stopping", False))
    )
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(settings.cors_origins),
        allow_credentials=True,
        allow_methods=["*"],
        allow_headers=["*"],
    )
    app.add_middleware(Instrumented)
    return app
