"""Requests still going when the gateway stops: answered 503 (try again), not cut.

On SIGTERM (a rolling update, a scale-down) the gateway stops taking connections and gives
the requests in progress SHUTDOWN_GRACE seconds; uvicorn then cancels the rest. Those are
mostly waiting for a run, which goes on without them (runs are durable). Cancelled, such a
request would answer uvicorn's plain-text 500, or nothing, and log a traceback; here it
answers a JSON 503 with `Retry-After`, which letta-client retries: with the same `otid` (or
`Idempotency-Key`) the retry, on another replica, follows the same run. A streamed answer
already under way just ends (its client resumes the run's stream by its id).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# How long requests in progress may go on once the gateway is told to stop (below the
# service's own stop timeout, o_runtime/service.py STOP_TIMEOUT, so they are answered first).
SHUTDOWN_GRACE = 5
STOPPING_DETAIL = "the gateway is stopping; send the request again (it is answered elsewhere)"


class AnswerWhileStopping:
    def __init__(self, app: ASGIApp, stopping: Callable[[], bool]) -> None:
        self.app = app
        self.stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if not self.stopping():
                raise
            # (Cancelled by the server's shutdown, the task's last act: its answer.)
            if started:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await send(_stopping_start())
                await send({"type": "http.response.body", "body": _STOPPING_BODY})


_STOPPING_BODY = json.dumps({"detail": STOPPING_DETAIL}).encode()


def _stopping_start() -> Message:
    return {
        "type": "http.response.start",
        "status": 503,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(_STOPPING_BODY)).encode()),
            (b"retry-after", b"1"),
            (b"x-should-retry", b"true"),
        ],
    }
