"""In-process fake of the OpenAI HTTP API, for tests, demos and benchmarks.

The server speaks the Chat Completions wire protocol closely enough for the real
``openai`` SDK (``OpenAI`` / ``AsyncOpenAI`` with ``base_url=fake.base_url``) to
work against it unchanged:

* ``POST /v1/chat/completions``: non-streaming and streaming (SSE
  ``data: {chunk}`` events terminated by ``data: [DONE]``), tool calls,
  ``stream_options.include_usage``, scripted HTTP errors and mid-stream failures.
* ``POST /v1/embeddings``: deterministic hash-based unit vectors, ``dimensions``
  and ``encoding_format`` (``float`` / ``base64``) supported.
* ``GET /v1/models`` and ``GET /v1/models/{id}``.

Tests script the server from Python, in the same process::

    fake = FakeOpenAI()
    fake.start()
    fake.push(Reply(tool_calls=[("get_weather", {"city": "Paris"})]), Reply(content="Sunny."))
    client = AsyncOpenAI(base_url=fake.base_url, api_key="test")
    ...
    assert fake.requests[0]["messages"][-1]["content"] == "Weather in Paris?"
    fake.stop()

With an empty queue, ``fake.default_reply(request_body)`` decides the reply; the
default echoes the last user message as ``"echo: <text>"``.

Standalone: ``python -m tests.fakes.openai_server --port 8999`` prints the base URL
and serves until interrupted.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import base64
import collections
import hashlib
import itertools
import json
import logging
import math
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

__all__ = ["DEFAULT_MODELS", "FakeOpenAI", "Reply", "echo_reply", "fake_embedding", "main"]

JSONDict = dict[str, Any]

DEFAULT_MODELS: tuple[str, ...] = (
    "gpt-4o-mini",
    "gpt-4o",
    "gpt-4.1-mini",
    "text-embedding-3-small",
    "text-embedding-3-large",
)
DEFAULT_EMBEDDING_DIM = 1536
DEFAULT_STREAM_CHUNK_SIZE = 8
_MODEL_CREATED = 1_700_000_000
_SYSTEM_FINGERPRINT = "fp_fakeopenai"


@dataclass
class Reply:
    """One scripted reply to a ``/v1/chat/completions`` request.

    ``tool_calls`` items are ``(function_name, arguments)``; arguments given as a
    mapping are JSON-encoded, arguments given as a ``str`` are sent verbatim.
    ``raw_arguments``, if set, replaces the arguments string of *every* tool call
    (to simulate malformed JSON). Tool-call ids are generated as ``call_<n>``
    (``n`` counts from 1 per server, restarting on :meth:`FakeOpenAI.reset`).

    ``status`` >= 400 answers with an OpenAI-format error body instead (429 carries
    ``retry-after: 0``); ``error_message`` overrides the default message.

    ``error_mid_stream`` (streaming requests only) sends roughly half the chunks,
    then fails: ``mid_stream_error="event"`` sends an SSE ``data: {"error": ...}``
    event (the SDK raises ``openai.APIError``), ``"disconnect"`` drops the
    connection without finishing the chunked body (``openai.APIConnectionError``).

    ``thinking`` (FakeAnthropic only) puts a signed thinking block first.

    ``delay`` waits that many seconds before answering (timeouts, cancellation).
    ``release``, if set, holds the answer until the test sets the event (to kill
    a client exactly while its request is in flight).
    """

    content: str | None = None
    tool_calls: Sequence[tuple[str, Mapping[str, Any] | str]] = ()
    finish_reason: str | None = None
    status: int = 200
    error_mid_stream: bool = False
    mid_stream_error: Literal["event", "disconnect"] = "event"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    raw_arguments: str | None = None
    error_message: str | None = None
    delay: float = 0.0
    release: threading.Event | None = None
    # (Streaming only) sends about half the chunks, then waits for the test to set it
    # before the rest: the client has seen part of the answer, and the answer is not over.
    hold_mid_stream: threading.Event | None = None
    # FakeAnthropic only: a signed thinking block before the answer (extended thinking).
    thinking: str | None = None


# --------------------------------------------------------------------------- helpers


def _estimate_tokens(text: str) -> int:
    """Very rough token count (~4 characters per token), never below 1."""
    return max(1, math.ceil(len(text) / 4))


def _content_text(content: Any) -> str:
    """Text of a message ``content`` field: a string or a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping):
                text = part.get("text", part.get("refusal"))
                if isinstance(text, str):
                    parts.append(text)
        return "".join(parts)
    return str(content)


def _message_text(message: Any) -> str:
    if not isinstance(message, Mapping):
        return ""
    chunks = [_content_text(message.get("content"))]
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            function = call.get("function")
            if isinstance(function, Mapping):
                chunks.append(str(function.get("name", "")))
                chunks.append(str(function.get("arguments", "")))
    return " ".join(c for c in chunks if c)


class PrefixCache:
    """OpenAI's automatic prompt caching as its documentation describes it: a prompt of
    MIN_CACHED tokens or more reuses the longest prefix an earlier request sent (here at
    message boundaries, the tools first), counted in steps of STEP tokens from MIN_CACHED;
    `cached_tokens` in the usage says how many."""

    MIN_CACHED = 1024
    STEP = 128

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def cached_tokens(self, body: Mapping[str, Any]) -> int:
        prefix = hashlib.sha256()
        tools = body.get("tools")
        counted = _estimate_tokens(json.dumps(tools)) if tools else 0
        prefix.update(json.dumps(tools, sort_keys=True).encode())
        boundaries: list[tuple[int, str]] = []
        messages = body.get("messages")
        for m in messages if isinstance(messages, list) else []:
            prefix.update(json.dumps(m, sort_keys=True).encode())
            counted += _estimate_tokens(_message_text(m)) + 4
            boundaries.append((counted, prefix.hexdigest()))
        # (The last boundary is the whole prompt: a prefix is reused only with more after it.)
        reused = max((n for n, h in boundaries[:-1] if h in self._seen), default=0)
        self._seen.update(h for _, h in boundaries)
        if reused < self.MIN_CACHED:
            return 0
        return self.MIN_CACHED + (reused - self.MIN_CACHED) // self.STEP * self.STEP


def _prompt_tokens(body: Mapping[str, Any]) -> int:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return 1
    # ~4 tokens of per-message framing, like the real tokenizer's chat template.
    total = sum(_estimate_tokens(_message_text(m)) + 4 for m in messages)
    tools = body.get("tools")
    if tools:
        total += _estimate_tokens(json.dumps(tools))
    return max(1, total)


def echo_reply(body: Mapping[str, Any]) -> Reply:
    """Default reply: ``"echo: <text of the last user message>"``."""
    messages = body.get("messages")
    text = ""
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, Mapping) and message.get("role") == "user":
                text = _content_text(message.get("content"))
                break
    return Reply(content=f"echo: {text}")


def fake_embedding(text: str | Sequence[int], dim: int = DEFAULT_EMBEDDING_DIM) -> list[float]:
    """Deterministic pseudo-embedding: hash-derived, L2-normalised, float32 values.

    ``text`` may also be a token-id array (as the embeddings API accepts).
    Identical inputs give identical vectors; different inputs are ~orthogonal.
    """
    if dim <= 0:
        raise ValueError("dim must be positive")
    if isinstance(text, str):
        data = text.encode("utf-8")
    else:
        data = json.dumps([int(t) for t in text]).encode("ascii")
    digest = hashlib.shake_256(b"fake-openai-embedding\x00" + data).digest(4 * dim)
    raw = struct.unpack(f"<{dim}I", digest)
    values = [x / 2_147_483_647.5 - 1.0 for x in raw]  # uniform in [-1, 1]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    # Round-trip through float32 so float and base64 encodings carry identical values.
    return array.array("f", [v / norm for v in values]).tolist()


def _embedding_base64(vector: Sequence[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def _error_body(
    status: int, message: str | None = None, *, type_: str | None = None, code: str | None = None
) -> JSONDict:
    if status == 429:
        default_message = "Rate limit reached for requests (fake). Please try again."
        default_type, default_code = "requests", "rate_limit_exceeded"
    elif status >= 500:
        default_message = "The server had an error while processing your request. Sorry about that!"
        default_type, default_code = "server_error", None
    elif status == 401:
        default_message = "Incorrect API key provided."
        default_type, default_code = "invalid_request_error", "invalid_api_key"
    else:
        default_message = f"Request failed with status {status}."
        default_type, default_code = "invalid_request_error", None
    return {
        "error": {
            "message": message if message is not None else default_message,
            "type": type_ if type_ is not None else default_type,
            "param": None,
            "code": code if code is not None else default_code,
        }
    }


def _request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


def _error_response(
    status: int, message: str | None = None, *, type_: str | None = None, code: str | None = None
) -> JSONResponse:
    headers = {"x-request-id": _request_id()}
    if status == 429:
        headers["retry-after"] = "0"
    return JSONResponse(
        _error_body(status, message, type_=type_, code=code), status_code=status, headers=headers
    )


class _KeyCheck:
    """Refuses a request without the fake's key (FakeOpenAI.api_key), as OpenAI does. Plain
    ASGI: it leaves streamed answers (and their disconnects) as they are."""

    def __init__(self, app: Any, fake: FakeOpenAI) -> None:
        self.app = app
        self.fake = fake

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        expected = self.fake.api_key
        if scope["type"] == "http" and expected is not None:
            given = dict(scope["headers"]).get(b"authorization", b"").decode()
            if given != f"Bearer {expected}":
                await _error_response(401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _sse(obj: Any) -> bytes:
    return f"data: {_dumps(obj)}\n\n".encode()


def _split(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class _SimulatedDisconnect(Exception):
    """Raised inside a streaming body to make uvicorn drop the connection mid-response."""


class _DropSimulatedDisconnectLogs(logging.Filter):
    """Silences uvicorn's "Exception in ASGI application" log for simulated disconnects only."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not _contains_simulated_disconnect(exc)


def _contains_simulated_disconnect(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    if isinstance(exc, _SimulatedDisconnect):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_contains_simulated_disconnect(e) for e in exc.exceptions)
    return _contains_simulated_disconnect(exc.__cause__ or exc.__context__)


def _install_log_filter() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DropSimulatedDisconnectLogs) for f in logger.filters):
        logger.addFilter(_DropSimulatedDisconnectLogs())


@dataclass
class _Completion:
    """A reply resolved against a request: ids, serialised arguments, usage."""

    id: str
    created: int
    model: str
    content: str | None
    tool_calls: list[tuple[str, str, str]]  # (call id, function name, arguments string)
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    def usage(self) -> JSONDict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def to_response(self) -> JSONDict:
        message: JSONDict = {
            "role": "assistant",
            "content": self.content,
            "refusal": None,
            "annotations": [],
        }
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
                for call_id, name, arguments in self.tool_calls
            ]
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                }
            ],
            "usage": self.usage(),
            "service_tier": "default",
            "system_fingerprint": _SYSTEM_FINGERPRINT,
        }

    def to_chunks(self, chunk_size: int, include_usage: bool) -> list[JSONDict]:
        """The SSE payloads of a streamed response, in order (without ``[DONE]``)."""

        def chunk(delta: JSONDict, finish_reason: str | None = None) -> JSONDict:
            out: JSONDict = {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "service_tier": "default",
                "system_fingerprint": _SYSTEM_FINGERPRINT,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                ],
            }
            if include_usage:
                out["usage"] = None
            return out

        deltas: list[JSONDict] = []
        first: JSONDict = {
            "role": "assistant",
            "content": "" if self.content is not None else None,
            "refusal": None,
        }
        if self.content:
            deltas.append(first)
            deltas.extend({"content": piece} for piece in _split(self.content, chunk_size))
        for index, (call_id, name, arguments) in enumerate(self.tool_calls):
            header: JSONDict = {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            if not deltas:  # like the real API: the first tool call rides on the role delta
                deltas.append({**first, "tool_calls": [header]})
            else:
                deltas.append({"tool_calls": [header]})
            if arguments:
                deltas.extend(
                    {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                    for piece in _split(arguments, chunk_size)
                )
        if not deltas:
            deltas.append(first)

        chunks = [chunk(delta) for delta in deltas]
        chunks.append(chunk({}, self.finish_reason))
        if include_usage:
            usage_chunk = chunk({})
            usage_chunk["choices"] = []
            usage_chunk["usage"] = self.usage()
            chunks.append(usage_chunk)
        return chunks


class _Server(uvicorn.Server):
    """uvicorn server that signals a threading.Event once it is listening (or has failed)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()


# --------------------------------------------------------------------------- server


class FakeOpenAI:
    """A scriptable fake OpenAI API server running uvicorn in a background thread."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        embedding_dim: int = DEFAULT_EMBEDDING_DIM,
        models: Sequence[str] = DEFAULT_MODELS,
        stream_chunk_size: int = DEFAULT_STREAM_CHUNK_SIZE,
    ) -> None:
        if stream_chunk_size <= 0:
            raise ValueError("stream_chunk_size must be positive")
        self.host = host
        self.port = port
        self.embedding_dim = embedding_dim
        self.models: list[str] = list(models)
        self.stream_chunk_size = stream_chunk_size
        #: What earlier requests sent, for the usage's cached_tokens (OpenAI's prompt cache).
        self.cache = PrefixCache()
        #: Every ``/v1/chat/completions`` request body, in arrival order.
        self.requests: list[JSONDict] = []
        #: Every ``/v1/embeddings`` request body, in arrival order.
        self.embedding_requests: list[JSONDict] = []
        #: While not None: embedding requests beyond this many (counted in
        #: ``embedding_requests``) are held unanswered until ``release_embeddings()``
        #: (a test kills the caller while its request is held).
        self.embeddings_answered_up_to: int | None = None
        #: While not None: every request must carry ``Authorization: Bearer <api_key>``,
        #: else it is refused with OpenAI's 401 (a provider's key, checked).
        self.api_key: str | None = None
        #: Decides the reply when the queue is empty (default: echo the last user message).
        self.default_reply: Callable[[JSONDict], Reply] = echo_reply
        self._queue: collections.deque[Reply] = collections.deque()
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._call_ids = itertools.count(1)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._thread_error: BaseException | None = None
        self.app = self._build_app()

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        host = self.host
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout: float = 10.0) -> None:
        """Bind, start serving in a daemon thread, and return once it is listening."""
        if self._server is not None:
            raise RuntimeError("FakeOpenAI is already started")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # Accepted connections inherit it: without it, Nagle's algorithm and the client's
            # delayed ACK add ~40 ms to every response (asyncio only sets it for proto=TCP).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind((self.host, self.port))
            sock.listen(1024)
        except BaseException:
            sock.close()
            raise
        self.port = int(sock.getsockname()[1])

        config = uvicorn.Config(
            self.app,
            loop="asyncio",
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        _install_log_filter()
        server = _Server(config)
        self._thread_error = None

        def run() -> None:
            try:
                server.run(sockets=[sock])
            except BaseException as exc:  # surfaced by start(); SystemExit on startup failure
                self._thread_error = exc
            finally:
                server.ready.set()

        thread = threading.Thread(target=run, name=f"fake-openai:{self.port}", daemon=True)
        self._server, self._thread, self._sock = server, thread, sock
        thread.start()
        if not server.ready.wait(timeout) or not server.started:
            error = self._thread_error
            self.stop()
            raise RuntimeError(f"FakeOpenAI failed to start on {self.host}:{self.port}") from error

    def stop(self, timeout: float = 10.0) -> None:
        """Ask uvicorn to exit and wait for the thread. Idempotent."""
        server, thread, sock = self._server, self._thread, self._sock
        self._server = self._thread = self._sock = None
        if server is not None:
            server.should_exit = True
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive() and server is not None:
                server.force_exit = True
                thread.join(timeout)
        if sock is not None:
            sock.close()

    def __enter__(self) -> FakeOpenAI:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ scripting

    def push(self, *responses: Reply) -> None:
        """Queue replies; each chat completion request consumes one, FIFO."""
        with self._lock:
            self._queue.extend(responses)

    @property
    def pending(self) -> int:
        """Number of queued replies not yet consumed."""
        with self._lock:
            return len(self._queue)

    def reset(self) -> None:
        """Clear the queue and recorded requests, restart call ids, restore the echo default."""
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.embedding_requests.clear()
            self.cache = PrefixCache()
            self._call_ids = itertools.count(1)
            self.default_reply = echo_reply
            self.embeddings_answered_up_to = None
            self.api_key = None
            self._arrived.notify_all()

    def wait_for_requests(
        self, predicate: Callable[[list[JSONDict]], bool], timeout: float = 30.0
    ) -> bool:
        """Block until ``predicate(requests)`` holds (True) or ``timeout`` passes (False).

        Blocking: from async code, run it in a thread (``asyncio.to_thread``).
        """
        with self._arrived:
            return self._arrived.wait_for(lambda: predicate(self.requests), timeout)

    def hold_embeddings_after(self, count: int) -> None:
        """Answer `count` more embedding requests, then hold each further one unanswered
        until ``release_embeddings()``."""
        with self._arrived:
            self.embeddings_answered_up_to = len(self.embedding_requests) + count

    def release_embeddings(self) -> None:
        with self._arrived:
            self.embeddings_answered_up_to = None
            self.api_key = None
            self._arrived.notify_all()

    def wait_for_embedding_requests(self, count: int, timeout: float = 30.0) -> bool:
        """Block until ``count`` embedding requests have arrived (True) or ``timeout``
        passes (False). Blocking: from async code, run it in a thread."""
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self.embedding_requests) >= count, timeout)

    def _embedding_held(self, position: int) -> None:
        with self._arrived:
            self._arrived.wait_for(
                lambda: (
                    self.embeddings_answered_up_to is None
                    or position < self.embeddings_answered_up_to
                )
            )

    # ------------------------------------------------------------------ internals

    def _take_reply(self, body: JSONDict) -> Reply:
        with self._lock:
            self.requests.append(body)
            reply = self._queue.popleft() if self._queue else None
            self._arrived.notify_all()
        return reply if reply is not None else self.default_reply(body)

    def _resolve(self, reply: Reply, body: Mapping[str, Any]) -> _Completion:
        with self._lock:
            call_ids = [f"call_{next(self._call_ids)}" for _ in reply.tool_calls]
        tool_calls: list[tuple[str, str, str]] = []
        for call_id, (name, arguments) in zip(call_ids, reply.tool_calls, strict=True):
            if reply.raw_arguments is not None:
                args_text = reply.raw_arguments
            elif isinstance(arguments, str):
                args_text = arguments
            else:
                args_text = json.dumps(dict(arguments), ensure_ascii=False)
            tool_calls.append((call_id, name, args_text))

        finish_reason = reply.finish_reason or ("tool_calls" if tool_calls else "stop")
        if reply.completion_tokens is not None:
            completion_tokens = reply.completion_tokens
        else:
            generated = (reply.content or "") + "".join(n + a for _, n, a in tool_calls)
            completion_tokens = _estimate_tokens(generated)
        prompt_tokens = (
            reply.prompt_tokens if reply.prompt_tokens is not None else _prompt_tokens(body)
        )
        # (Scripted prompt tokens: nothing cached.)
        cached = self.cache.cached_tokens(body) if reply.prompt_tokens is None else 0
        return _Completion(
            id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
            created=int(time.time()),
            model=str(body.get("model") or "gpt-4o-mini"),
            content=reply.content,
            tool_calls=tool_calls,
            finish_reason=finish_reason,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached_tokens=min(cached, prompt_tokens),
        )

    async def _stream(
        self, completion: _Completion, reply: Reply, include_usage: bool
    ) -> AsyncIterator[bytes]:
        chunks = completion.to_chunks(self.stream_chunk_size, include_usage)
        if reply.error_mid_stream:
            # Send the role delta plus about half of the rest, then fail.
            cut = min(len(chunks), max(2, len(chunks) // 2))
            for payload in chunks[:cut]:
                yield _sse(payload)
            if reply.mid_stream_error == "disconnect":
                raise _SimulatedDisconnect("simulated connection drop")
            yield _sse(_error_body(500, reply.error_message))
            return
        held = reply.hold_mid_stream
        cut = min(len(chunks), max(2, len(chunks) // 2)) if held is not None else len(chunks)
        for payload in chunks[:cut]:
            yield _sse(payload)
        if held is not None:
            await asyncio.get_running_loop().run_in_executor(None, held.wait)
            for payload in chunks[cut:]:
                yield _sse(payload)
        yield b"data: [DONE]\n\n"

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="Fake OpenAI", openapi_url=None, docs_url=None, redoc_url=None)
        app.add_middleware(_KeyCheck, fake=self)

        async def read_json(request: Request) -> JSONDict | JSONResponse:
            try:
                body = json.loads(await request.body())
            except ValueError:
                return _error_response(
                    400,
                    "We could not parse the JSON body of your request. (HINT: This likely means "
                    "you aren't using your HTTP library correctly.)",
                )
            if not isinstance(body, dict):
                return _error_response(400, "The request body must be a JSON object.")
            return body

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> Response:
            body = await read_json(request)
            if isinstance(body, JSONResponse):
                return body
            reply = self._take_reply(body)
            if reply.delay > 0:
                await asyncio.sleep(reply.delay)
            if reply.release is not None:
                await asyncio.get_running_loop().run_in_executor(None, reply.release.wait)
            if reply.status >= 400:
                return _error_response(reply.status, reply.error_message)
            completion = self._resolve(reply, body)
            headers = {"x-request-id": _request_id(), "openai-model": completion.model}
            if body.get("stream"):
                stream_options = body.get("stream_options")
                include_usage = isinstance(stream_options, Mapping) and bool(
                    stream_options.get("include_usage")
                )
                return StreamingResponse(
                    self._stream(completion, reply, include_usage),
                    media_type="text/event-stream; charset=utf-8",
                    headers={**headers, "cache-control": "no-cache"},
                )
            return JSONResponse(completion.to_response(), status_code=reply.status, headers=headers)

        @app.post("/v1/embeddings")
        async def embeddings(request: Request) -> Response:
            body = await read_json(request)
            if isinstance(body, JSONResponse):
                return body
            with self._arrived:
                self.embedding_requests.append(body)
                position = len(self.embedding_requests) - 1
                self._arrived.notify_all()
            if self.embeddings_answered_up_to is not None:
                await asyncio.to_thread(self._embedding_held, position)
            raw_input = body.get("input")
            inputs: list[str | list[int]]
            if isinstance(raw_input, str):
                inputs = [raw_input]
            elif (
                isinstance(raw_input, list)
                and raw_input
                and all(isinstance(t, int) for t in raw_input)
            ):
                inputs = [raw_input]
            elif (
                isinstance(raw_input, list)
                and raw_input
                and all(isinstance(t, str | list) for t in raw_input)
            ):
                inputs = raw_input
            else:
                return _error_response(400, "'input' must be a non-empty string or array.")
            dimensions = body.get("dimensions")
            if dimensions is None:
                dim = self.embedding_dim
            elif (
                isinstance(dimensions, int) and not isinstance(dimensions, bool) and dimensions > 0
            ):
                dim = dimensions
            else:
                return _error_response(400, f"Invalid 'dimensions': {dimensions!r}.")
            encoding_format = body.get("encoding_format") or "float"
            if encoding_format not in ("float", "base64"):
                return _error_response(400, f"Invalid 'encoding_format': {encoding_format!r}.")

            data: list[JSONDict] = []
            tokens = 0
            for index, item in enumerate(inputs):
                vector = fake_embedding(item, dim)
                tokens += _estimate_tokens(item) if isinstance(item, str) else max(1, len(item))
                encoded: list[float] | str = (
                    _embedding_base64(vector) if encoding_format == "base64" else vector
                )
                data.append({"object": "embedding", "index": index, "embedding": encoded})
            return JSONResponse(
                {
                    "object": "list",
                    "data": data,
                    "model": str(body.get("model") or "text-embedding-3-small"),
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                },
                headers={"x-request-id": _request_id()},
            )

        def model_object(model_id: str) -> JSONDict:
            return {
                "id": model_id,
                "object": "model",
                "created": _MODEL_CREATED,
                "owned_by": "system",
            }

        @app.get("/v1/models")
        async def list_models() -> Response:
            return JSONResponse({"object": "list", "data": [model_object(m) for m in self.models]})

        @app.get("/v1/models/{model_id:path}")
        async def retrieve_model(model_id: str) -> Response:
            if model_id not in self.models:
                return _error_response(
                    404, f"The model '{model_id}' does not exist", code="model_not_found"
                )
            return JSONResponse(model_object(model_id))

        return app


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Serve a fake OpenAI API (chat completions, embeddings, models)."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port", type=int, default=8999, help="0 picks a free port (default: %(default)s)"
    )
    parser.add_argument("--embedding-dim", type=int, default=DEFAULT_EMBEDDING_DIM)
    parser.add_argument("--stream-chunk-size", type=int, default=DEFAULT_STREAM_CHUNK_SIZE)
    args = parser.parse_args(argv)

    fake = FakeOpenAI(
        args.host,
        args.port,
        embedding_dim=args.embedding_dim,
        stream_chunk_size=args.stream_chunk_size,
    )
    fake.start()
    print(fake.base_url, flush=True)
    try:
        while fake.running:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
