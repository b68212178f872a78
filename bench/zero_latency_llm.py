"""A zero-latency OpenAI-compatible chat-completions server for the agent-loop benchmark.

The benchmark measures O's orchestration, so the LLM should cost nothing. The
tests' FakeOpenAI (FastAPI + uvicorn, scripting, request log) spent ~1.5 ms of
CPU per call on the benchmark's two shared cores; this server answers
`POST /v1/chat/completions` (non-streaming) straight from an asyncio protocol
with httptools parsing, in a process of its own. `answer(body)` decides the
reply, as the benchmark's script does with FakeOpenAI.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import socket
import time
from collections.abc import Callable
from typing import Any

import httptools

Answer = Callable[[dict[str, Any]], dict[str, Any]]


def completion(message: dict[str, Any], finish_reason: str, prompt_tokens: int = 10) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "bench",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": 2,
                "total_tokens": prompt_tokens + 2,
            },
        }
    ).encode()


def respond(answer: Answer, body: bytes, realistic_usage: bool = False) -> tuple[int, bytes]:
    try:
        request = json.loads(body)
    except ValueError:
        return 400, b'{"error": {"message": "the body is not JSON"}}'
    message = answer(request)
    # About 4 bytes of request per token, as real tokenizers count English and
    # JSON: what the executor calibrates its estimates by (and summarizes by).
    prompt_tokens = len(body) // 4 if realistic_usage else 10
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return 200, completion(message, finish, prompt_tokens)


class HTTPConnection(asyncio.Protocol):
    """HTTP/1.1 keep-alive, one request at a time, as the openai SDK's client sends them."""

    def __init__(self, answer: Answer, realistic_usage: bool = False) -> None:
        self.answer = answer
        self.realistic_usage = realistic_usage
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        if self.url.split(b"?")[0].rstrip(b"/").endswith(b"/chat/completions"):
            status, payload = respond(self.answer, b"".join(self.body), self.realistic_usage)
        else:
            status, payload = 404, b'{"error": {"message": "not found"}}'
        self.url, self.body = b"", []
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            % (status, b"OK" if status == 200 else b"Error", len(payload))
            + payload
        )


def serve(port: int, answer: Answer, realistic_usage: bool = False) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: HTTPConnection(answer, realistic_usage), "127.0.0.1", port
        )
        await server.serve_forever()

    asyncio.run(main())


class ZeroLatencyLLM:
    """The server in a child process of its own; `base_url` for an OpenAI client. `start()` and
    `stop()` it, or use it as a context manager.

    `answer` must be a module-level function (the child is spawned, not forked:
    the benchmark starts it from inside its event loop).
    """

    def __init__(self, answer: Answer, realistic_usage: bool = False) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.process = multiprocessing.get_context("spawn").Process(
            target=serve, args=(self.port, answer, realistic_usage), daemon=True
        )

    def start(self, timeout: float = 30.0) -> None:
        self.process.start()
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline or not self.process.is_alive():
                    raise RuntimeError("the zero-latency LLM server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        self.process.join(5)

    def __enter__(self) -> ZeroLatencyLLM:
        """Started; stopped at the end of the `with`."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.process.pid or 0
