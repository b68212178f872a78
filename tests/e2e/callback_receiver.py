"""A local receiver of completion callbacks for the e2e tests: an HTTP server on 127.0.0.1
that records what it gets and answers as scripted (a status per request, or a hold until
the test releases it)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# What the e2e system signs callbacks with (tests/e2e/conftest.py passes it).
CALLBACK_SECRET = "e2e-callback-secret-0123456789abcdef"
DEADLINE = 30.0


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def delivery_id(self) -> str:
        return self.headers["O-Delivery-Id"]


@dataclass
class Receiver:
    # The status of each request in turn (the last one repeats).
    statuses: list[int] = field(default_factory=lambda: [200])
    # With it, the first request is answered only once the test sets it.
    hold_first: threading.Event | None = None
    received: list[Received] = field(default_factory=list)
    url: str = ""
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int) -> list[Received]:
        """The first `count` requests, once they have come (AssertionError after DEADLINE)."""
        with self._changed:
            arrived = self._changed.wait_for(lambda: len(self.received) >= count, DEADLINE)
            assert arrived, f"{len(self.received)} callbacks came, not {count}"
            return list(self.received)

    def _record(self, got: Received) -> int:
        with self._changed:
            n = len(self.received)
            self.received.append(got)
            self._changed.notify_all()
        return self.statuses[min(n, len(self.statuses) - 1)]


@contextmanager
def receiving(
    statuses: list[int] | None = None, hold_first: threading.Event | None = None
) -> Iterator[Receiver]:
    receiver = Receiver(statuses or [200], hold_first)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            got = Received(dict(self.headers.items()), self.rfile.read(length))
            first = not receiver.received
            status = receiver._record(got)
            if first and receiver.hold_first is not None:
                receiver.hold_first.wait(DEADLINE)
            try:
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:
                pass  # (the sender is gone: killed mid-delivery on purpose)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/o"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        if hold_first is not None:
            hold_first.set()
        server.shutdown()
        server.server_close()
