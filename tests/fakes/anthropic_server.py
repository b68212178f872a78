"""In-process fake of the Anthropic Messages API, for tests and demos.

Speaks the wire protocol closely enough for the official ``anthropic`` SDK
(``AsyncAnthropic(base_url=fake.base_url)``):

* ``POST /v1/messages``: non-streaming and streaming (SSE ``message_start``,
  ``content_block_start/delta/stop`` with ``text_delta`` and ``input_json_delta``,
  ``message_delta``, ``message_stop``), ``tool_use`` blocks, usage, scripted
  HTTP errors (Anthropic's error body) and an ``error`` event mid-stream.
* ``GET /v1/models``.

It is scripted with the same ``Reply`` objects as ``FakeOpenAI``: push replies,
or set ``default_reply(request_body)``; ``requests`` records every body.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import itertools
import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tests.fakes.openai_server import Reply, _Server

JSONDict = dict[str, Any]
DEFAULT_MODELS = ("claude-sonnet-5-5", "claude-haiku-5-5")
CHUNK = 8

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _error(status: int, message: str | None) -> JSONResponse:
    kind = _ERROR_TYPES.get(status, "api_error")
    headers = {"request-id": f"req_{uuid.uuid4().hex}"}
    if status == 429:
        headers["retry-after"] = "0"
    return JSONResponse(
        {"type": "error", "error": {"type": kind, "message": message or f"fake {kind}"}},
        status_code=status,
        headers=headers,
    )


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def echo_reply(body: JSONDict) -> Reply:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            text = _text_of(message.get("content"))
            if text:
                return Reply(content=f"echo: {text}")
    return Reply(content="echo: ")


def _sse(event: str, data: JSONDict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


class PromptCache:
    """Anthropic's prompt caching as its documentation describes it: a request's prefix
    (its tools, then its system blocks, then its messages' blocks) up to a block marked
    `cache_control` is written to the cache; a later request reads the longest prefix
    written before that ends at one of its marks or up to LOOKBACK blocks before one.
    Tokens are counted as this fake counts them (a quarter of a block's JSON)."""

    LOOKBACK = 20

    def __init__(self) -> None:
        self._written: set[str] = set()

    def usage(self, body: JSONDict) -> tuple[int, int, int]:
        """(input_tokens, cache_creation_input_tokens, cache_read_input_tokens)."""
        system = body.get("system") or []
        blocks: list[Any] = [*(body.get("tools") or [])]
        blocks += [{"type": "text", "text": system}] if isinstance(system, str) else system
        for message in body.get("messages") or []:
            content = message.get("content")
            blocks += [{"type": "text", "text": content}] if isinstance(content, str) else content
        prefix = hashlib.sha256()
        # At each block: the tokens up to and with it, and the prefix's hash.
        at: list[tuple[int, str]] = []
        marks: list[int] = []
        for i, block in enumerate(blocks):
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            text = json.dumps(plain, sort_keys=True)
            prefix.update(text.encode())
            at.append(((at[-1][0] if at else 0) + max(1, len(text) // 4), prefix.hexdigest()))
            if "cache_control" in block:
                marks.append(i)
        looked = {j for i in marks for j in range(max(0, i - self.LOOKBACK), i + 1)}
        read = max((at[j][0] for j in looked if at[j][1] in self._written), default=0)
        written = max((at[i][0] for i in marks), default=0)
        self._written.update(at[i][1] for i in marks)
        total = at[-1][0] if at else 0
        return total - max(read, written), max(0, written - read), read


class FakeAnthropic:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.models = list(DEFAULT_MODELS)
        self.requests: list[JSONDict] = []
        self.default_reply: Callable[[JSONDict], Reply] = echo_reply
        self._queue: collections.deque[Reply] = collections.deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.cache = PromptCache()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.app = self._build_app()

    @property
    def base_url(self) -> str:
        # The SDK appends /v1/messages itself.
        return f"http://{self.host}:{self.port}"

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self._ids = itertools.count(1)
            self.cache = PromptCache()
            self.default_reply = echo_reply

    def start(self) -> None:
        import socket

        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: without it, Nagle's algorithm and the client's
        # delayed ACK add ~40 ms to every response (asyncio only sets it for proto=TCP).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((self.host, self.port))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, loop="asyncio", lifespan="off", log_level="warning", access_log=False
        )
        server = _Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._server, self._thread = server, thread
        thread.start()
        if not server.ready.wait(10) or not server.started:
            raise RuntimeError("FakeAnthropic failed to start")

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self._server = self._thread = None

    def _take(self, body: JSONDict) -> Reply:
        with self._lock:
            self.requests.append(body)
            reply = self._queue.popleft() if self._queue else None
        return reply if reply is not None else self.default_reply(body)

    def _message(self, reply: Reply, body: JSONDict) -> JSONDict:
        content: list[JSONDict] = []
        if reply.thinking:
            signature = hashlib.sha256(reply.thinking.encode()).hexdigest()
            content.append({"type": "thinking", "thinking": reply.thinking, "signature": signature})
        if reply.content:
            content.append({"type": "text", "text": reply.content})
        for name, arguments in reply.tool_calls:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
            call_id = f"toolu_{next(self._ids):04d}"
            content.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
        if reply.prompt_tokens:  # (as scripted: nothing read from or written to the cache)
            usage = {"input_tokens": reply.prompt_tokens}
        else:
            fresh, written, read = self.cache.usage(body)
            usage = {
                "input_tokens": fresh,
                "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read,
            }
        completion = reply.completion_tokens or max(1, len(json.dumps(content)) // 4)
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": usage | {"output_tokens": completion},
        }

    async def _stream(self, message: JSONDict, reply: Reply) -> AsyncIterator[bytes]:
        events: list[bytes] = []
        start = {**message, "content": [], "stop_reason": None}
        start["usage"] = message["usage"] | {"output_tokens": 1}
        events.append(_sse("message_start", {"type": "message_start", "message": start}))
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                opened = {"type": "text", "text": ""}
                pieces = [
                    {"type": "text_delta", "text": block["text"][i : i + CHUNK]}
                    for i in range(0, len(block["text"]), CHUNK)
                ]
            elif block["type"] == "thinking":
                opened = {"type": "thinking", "thinking": "", "signature": ""}
                pieces = [{"type": "thinking_delta", "thinking": block["thinking"]}]
                pieces.append({"type": "signature_delta", "signature": block["signature"]})
            else:
                opened = {**block, "input": {}}
                raw = reply.raw_arguments or json.dumps(block["input"])
                pieces = [
                    {"type": "input_json_delta", "partial_json": raw[i : i + CHUNK]}
                    for i in range(0, len(raw), CHUNK)
                ]
            events.append(
                _sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": opened},
                )
            )
            events += [
                _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
                for delta in pieces
            ]
            events.append(
                _sse("content_block_stop", {"type": "content_block_stop", "index": index})
            )
        events.append(
            _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                    "usage": {"output_tokens": message["usage"]["output_tokens"]},
                },
            )
        )
        events.append(_sse("message_stop", {"type": "message_stop"}))
        if reply.error_mid_stream:
            for event in events[: max(2, len(events) // 2)]:
                yield event
            yield _sse(
                "error",
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            )
            return
        for event in events:
            yield event

    def _build_app(self) -> FastAPI:
        app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

        @app.post("/v1/messages")
        async def messages(request: Request) -> Response:
            body = json.loads(await request.body())
            # SDK 2.x sends the key as a bearer token; older ones as x-api-key.
            if not (request.headers.get("x-api-key") or request.headers.get("authorization")):
                return _error(401, "x-api-key header is required")
            if not isinstance(body.get("max_tokens"), int):
                return _error(400, "max_tokens: Field required")
            reply = self._take(body)
            if reply.delay > 0:
                await asyncio.sleep(reply.delay)
            if reply.release is not None:
                await asyncio.get_running_loop().run_in_executor(None, reply.release.wait)
            if reply.status >= 400:
                return _error(reply.status, reply.error_message)
            message = self._message(reply, body)
            if body.get("stream"):
                return StreamingResponse(
                    self._stream(message, reply), media_type="text/event-stream"
                )
            return JSONResponse(message)

        @app.get("/v1/models")
        async def models() -> Response:
            data = [
                {
                    "type": "model",
                    "id": m,
                    "display_name": m,
                    "created_at": "2025-01-01T00:00:00Z",
                }
                for m in self.models
            ]
            return JSONResponse(
                {
                    "data": data,
                    "has_more": False,
                    "first_id": data[0]["id"] if data else None,
                    "last_id": data[-1]["id"] if data else None,
                }
            )

        return app
