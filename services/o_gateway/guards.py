"""Bad input stays cheap: limits on what a request may carry, and errors that are always JSON.

- `InputLimits` (plain ASGI, ahead of routing): a body over `O_MAX_BODY_BYTES` is a 413
  before it is read (by its Content-Length, or counted as it arrives when chunked); a URL
  with a NUL (`%00`) is a 422; an overlong query string a 414.
- `CheckedRoute`: a JSON body is decoded as strict UTF-8 and checked once with
  `o_contracts.limits.check_storable` (NUL, lone surrogates, integers beyond int64,
  non-finite numbers, nesting, string sizes) before FastAPI validates it; path and query
  parameters declared as a plain `int` are held to int32.
- `install_error_handlers`: a database or NATS outage is a 503 with `Retry-After`, a value
  the database refuses a 422, anything else unhandled a 500 with `{"detail": ...}` (its
  traceback logged); a 405 lists every method of its path in `Allow`.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Union, get_args, get_origin

import asyncpg
import nats.errors
import nats.js.errors
from fastapi import FastAPI, Path, Query, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import HTTPException, RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from o_contracts import limits
from o_runtime.outages import UNAVAILABLE, is_outage

log = logging.getLogger(__name__)

# A query string longer than this is refused (414): no route takes more than a few ids.
MAX_QUERY_BYTES = 8 * 1024
# What a 503 tells the client to wait before retrying, in seconds.
RETRY_AFTER_SECONDS = 2

# Exceptions that mean Postgres or NATS cannot be reached right now (not a bad request,
# not a bug): answered 503 with Retry-After. One list for every service: o_runtime.outages.


def _json_error(status: int, detail: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


# ---------------------------------------------------------------------------------------
# Before the application: what the HTTP server itself refuses.


class JsonHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol (httptools), but a request it cannot parse (raw non-ASCII
    bytes in the request line, a broken header ...) is answered with a JSON 400 like
    every other error, not uvicorn's plain text. Pass as `uvicorn.Config(http=...)`."""

    def send_400_response(self, msg: str) -> None:
        body = json.dumps({"detail": f"{msg.rstrip('.')}: not valid HTTP/1.1"}).encode()
        content = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()


# ---------------------------------------------------------------------------------------
# Before routing: sizes and the URL.


# A file upload's route (folders and Letta's older sources): its own limit, O_MAX_FILE_BYTES.
_UPLOAD_PATH = re.compile(r"^/v1/(folders|sources)/[^/]+/upload/?$")
# Room for the multipart framing around the file (boundaries, part headers, the name).
MULTIPART_ROOM = 64 * 1024


class InputLimits:
    """413 for a body over `max_body_bytes`, 422 for a NUL in the URL, 414 for a long query.

    A body with a Content-Length over the limit is refused before any of it is read
    (the server discards the rest); a chunked body is counted as the application reads
    it and refused once it passes the limit, so at most the limit is ever held. A file
    upload may carry `max_file_bytes` (and its multipart framing) instead.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int, max_file_bytes: int = 0) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_file_bytes = max_file_bytes

    def _limit(self, scope: Scope) -> tuple[int, str]:
        """The body limit of this request, and what a 413 says."""
        if self.max_file_bytes and scope["method"] == "POST" and _UPLOAD_PATH.match(scope["path"]):
            return (
                self.max_file_bytes + MULTIPART_ROOM,
                f"the file is over the upload limit of {self.max_file_bytes} bytes"
                " (O_MAX_FILE_BYTES)",
            )
        return (
            self.max_body_bytes,
            f"the request body is over the limit of {self.max_body_bytes} bytes",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query: bytes = scope["query_string"]
        if "\x00" in scope["path"] or b"%00" in query:
            response = _json_error(
                422, "the URL contains a NUL character (%00), which cannot be stored"
            )
            await response(scope, receive, send)
            return
        if len(query) > MAX_QUERY_BYTES:
            response = _json_error(
                414, f"the query string is over the limit of {MAX_QUERY_BYTES} bytes"
            )
            await response(scope, receive, send)
            return
        length = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = value
                break
        limit, too_large = self._limit(scope)
        if length is None:
            await self.app(scope, self._counted(receive, limit, too_large), send)
            return
        if not length.isdigit():
            await _json_error(400, "Content-Length is not a number")(scope, receive, send)
            return
        if int(length) > limit:
            await _json_error(413, too_large)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _counted(self, receive: Receive, limit: int, too_large: str) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise HTTPException(413, too_large)
            return message

        return counted


# ---------------------------------------------------------------------------------------
# Request bodies and parameters of every route.


def _bounded_int(text: str) -> int:
    # Called by the JSON decoder for each integer literal: digits beyond what int64 can
    # have are refused before Python converts them (slow, and capped at 4300 digits).
    if len(text.lstrip("-")) > 19:
        raise limits.Unstorable(
            "", f"an integer of {len(text)} digits is outside the 64-bit range that can be stored"
        )
    return int(text)


def _no_constant(name: str) -> Any:
    raise limits.Unstorable("", f"{name} is not valid JSON and cannot be stored")


_decode = json.JSONDecoder(parse_int=_bounded_int, parse_constant=_no_constant).decode


def decode_body(body: bytes) -> Any:
    """A request body as JSON: strict UTF-8, then `check_storable` over the whole value."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(
            400, f"the body is not valid UTF-8 (at byte {exc.start}); JSON must be UTF-8"
        ) from exc
    try:
        value = _decode(text)  # a JSONDecodeError goes on to FastAPI's 422
    except limits.Unstorable as exc:
        raise HTTPException(422, f"body: {exc.problem}") from exc
    except RecursionError as exc:
        raise HTTPException(
            422, f"body: is nested more than {limits.MAX_DEPTH} levels deep"
        ) from exc
    try:
        # Image data (base64) may be longer than a text: o_gateway/images.py bounds it.
        limits.check_storable(value, "body", long_texts=limits.IMAGE_DATA_PATHS)
    except limits.Unstorable as exc:
        raise HTTPException(422, str(exc)) from exc
    return value


class CheckedRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_checked_json"):
            self._checked_json = decode_body(await self.body())
        return self._checked_json


def _plain_int(annotation: Any) -> bool:
    if annotation is int:
        return True
    if get_origin(annotation) in (Union, type(int | None)):
        return set(get_args(annotation)) == {int, type(None)}
    return False


def bound_integers(endpoint: Callable[..., Any], path: str) -> None:
    """Give integer path and query parameters with no declared bound a maximum of int32.

    They are counts, limits and versions kept in `integer` columns; without a bound a
    client's 2**40 reaches Postgres (a 500) instead of being a 422. The bound is part of
    the signature FastAPI reads, so it is validated and documented like any other.
    """
    try:
        signature = inspect.signature(endpoint, eval_str=True)
    except (NameError, TypeError):
        return
    changed = False
    params = []
    for param in signature.parameters.values():
        if _plain_int(param.annotation):
            where = Path if "{" + param.name + "}" in path else Query
            bound = where(le=limits.INT32_MAX, ge=-limits.INT32_MAX - 1)
            param = param.replace(annotation=Annotated[param.annotation, bound])
            changed = True
        params.append(param)
    if changed:
        endpoint.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]


class CheckedRoute(APIRoute):
    """An APIRoute whose JSON body goes through `decode_body` (see the module's docstring)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        bound_integers(endpoint, path)
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def checked(request: Request) -> Response:
            return await handler(CheckedRequest(request.scope, request.receive))

        return checked


# ---------------------------------------------------------------------------------------
# Errors: always {"detail": ...}.


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _what(exc: BaseException) -> str:
    module = type(exc).__module__
    if module.startswith("asyncpg"):
        return "the database"
    if module.startswith("nats"):
        return "the message broker (NATS)"
    return "a backing service"


# Failures that say plainly that a server went away: logged in a line. Other
# UNAVAILABLE ones (an OSError of another kind ...) are logged with their traceback.
_PLAIN_OUTAGES: tuple[type[Exception], ...] = (
    ConnectionError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    nats.errors.Error,
)


def unavailable_response(request: Request, exc: BaseException) -> JSONResponse:
    plain = isinstance(exc, _PLAIN_OUTAGES)
    log.warning(
        "%s %s: 503, %s: %s",
        request.method,
        request.url.path,
        type(exc).__name__,
        exc,
        exc_info=None if plain else exc,
    )
    return _json_error(
        503,
        f"{_what(exc)} is unavailable right now ({type(exc).__name__}); retry shortly",
        {"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


async def unavailable(request: Request, exc: Exception) -> JSONResponse:
    if not is_outage(exc):
        log.error("%s %s: 500", request.method, request.url.path, exc_info=exc)
        return _json_error(500, f"internal server error ({type(exc).__name__})")
    return unavailable_response(request, exc)


async def unstorable(request: Request, exc: Exception) -> JSONResponse:
    # Postgres refused a value (class 22: out of range, bad encoding ...) that got past
    # the checks at the edge: the request's fault, but worth knowing about.
    log.warning("%s %s: 422 from the database: %s", request.method, request.url.path, exc)
    return _json_error(422, f"the database cannot store a value of this request: {exc}")


async def too_large_to_record(request: Request, exc: Exception) -> JSONResponse:
    log.warning("%s %s: 413, over NATS' payload limit", request.method, request.url.path)
    return _json_error(
        413, "the request is too large to record (over the message broker's payload limit)"
    )


async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    """The last resort (Starlette's ServerErrorMiddleware): it re-raises afterwards, so
    the server logs the traceback."""
    leaves = _leaves(exc)
    if all(is_outage(leaf) for leaf in leaves):
        return unavailable_response(request, leaves[0])
    return _json_error(500, f"internal server error ({type(exc).__name__})")


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 without echoing the input back (it may be megabytes, or unencodable)."""
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"type": e.get("type"), "loc": e.get("loc"), "msg": e.get("msg")} for e in exc.errors()
    ]
    return _json_error(422, jsonable_encoder(errors))


def allowed_methods(routes: list[Any], path: str) -> set[str]:
    """The methods of every route whose path matches (the app's routes are its own:
    app.add_routes)."""
    methods: set[str] = set()
    for route in routes:
        if isinstance(route, Route) and route.methods and route.path_regex.match(path):
            methods |= route.methods
    return methods


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 405:
        # Each method of a path is its own route: Starlette's Allow names only the
        # first one it met.
        # (A route may refuse its own method, as Letta's deprecated message edit does: that
        # method is then not allowed either.)
        allowed = allowed_methods(request.app.router.routes, request.url.path) - {request.method}
        headers = {**(exc.headers or {}), "Allow": ", ".join(sorted(allowed))}
        exc = StarletteHTTPException(405, exc.detail, headers)
    return await http_exception_handler(request, exc)


def install_error_handlers(app: FastAPI) -> None:
    for kind in UNAVAILABLE:
        app.add_exception_handler(kind, unavailable)
    app.add_exception_handler(asyncpg.DataError, unstorable)
    app.add_exception_handler(nats.errors.MaxPayloadError, too_large_to_record)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, internal_error)
