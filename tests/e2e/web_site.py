"""A small web site for fetch_webpage's tests, on 127.0.0.1 (which the e2e system allows,
O_WEB_ALLOWED_TARGETS), and an "internal" server on 127.0.0.2 (which it does not) that
records whether anything reached it.

Pages: `/article` (an article inside a menu and a footer), `/moved` (a redirect to it),
`/notes.txt` (plain text), `/paper.pdf` (a PDF of two pages), `/logo.png` (an image),
`/to-internal` (a redirect to the internal server).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.pdf_fixture import tiny_pdf

ARTICLE = """<!doctype html>
<html><head><title>Sea otters</title></head>
<body>
<nav><a href="/">Home</a> | <a href="/shop">Shop the otter store</a></nav>
<article>
<h1>Sea otters hold hands</h1>
<p>Sea otters hold hands while they sleep, so that the current does not carry them apart.
A group of resting otters is called a raft, and a raft can hold more than a hundred of them.</p>
<p>They wrap themselves in kelp for the same reason. Read <a href="https://pages.example/kelp">
more about kelp</a>.</p>
</article>
<footer>Copyright 2026 The Otter Gazette. Cookie settings.</footer>
</body></html>
"""
NOTES = "plain notes: otters eat sea urchins\nline two\n"


@dataclass
class Site:
    url: str = ""
    internal_url: str = ""
    internal_hits: list[str] = field(default_factory=list)


def _serve(host: str, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@contextmanager
def serving() -> Iterator[Site]:
    site = Site()

    class Internal(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            site.internal_hits.append(self.path)
            self._send(200, "text/plain", b"internal secret")

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    class Pages(Internal):
        def do_GET(self) -> None:
            if self.path == "/article":
                self._send(200, "text/html; charset=utf-8", ARTICLE.encode())
            elif self.path == "/moved":
                self._redirect("/article")
            elif self.path == "/to-internal":
                self._redirect(f"{site.internal_url}/secret")
            elif self.path == "/notes.txt":
                self._send(200, "text/plain; charset=utf-8", NOTES.encode())
            elif self.path == "/paper.pdf":
                pdf = tiny_pdf([["On the sleep of otters"], ["They hold hands."]])
                self._send(200, "application/pdf", pdf)
            elif self.path == "/logo.png":
                self._send(200, "image/png", b"\x89PNG\r\n\x1a\n" + bytes(64))
            else:
                self._send(404, "text/plain", b"not found")

        def _redirect(self, location: str) -> None:
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

    pages, internal = _serve("127.0.0.1", Pages), _serve("127.0.0.2", Internal)
    site.url = f"http://127.0.0.1:{pages.server_address[1]}"
    site.internal_url = f"http://127.0.0.2:{internal.server_address[1]}"
    try:
        yield site
    finally:
        for server in (pages, internal):
            server.shutdown()
            server.server_close()
