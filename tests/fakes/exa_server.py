"""A local server speaking Exa's HTTP API (`POST /search`, `POST /contents`), for the web
tools' tests: the real `exa-py` SDK talks to it as it talks to api.exa.ai.

It checks the `x-api-key` header against the keys it was given (401 with Exa's error body
otherwise), records every request (headers and JSON body, as the SDK sent them: camelCase,
contents nested), and answers deterministically: a search for "q" finds up to three pages
`https://pages.example/q/<n>` with a title, date, author, highlights and a summary, and their
text when `contents.text` is asked; `/contents` knows the pages in `known`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote


@dataclass(frozen=True)
class ExaRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeExa:
    keys: set[str] = field(default_factory=set)
    # url -> (title, text) of the pages /contents has.
    known: dict[str, tuple[str, str]] = field(default_factory=dict)
    requests: list[ExaRequest] = field(default_factory=list)
    url: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self, path: str) -> list[ExaRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.keys.clear()
            self.known.clear()

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        with self._lock:
            self.requests.append(ExaRequest(path, headers, body))
            allowed = headers.get("x-api-key") in self.keys
        if not allowed:
            return 401, {"requestId": "req-fake", "error": "Invalid API key", "tag": "INVALID_KEY"}
        if path == "/search":
            return 200, self._search(body)
        if path == "/contents":
            return 200, self._contents(body)
        return 404, {"error": f"no route {path}"}

    def _search(self, body: dict[str, Any]) -> dict[str, Any]:
        query = str(body.get("query", ""))
        contents = body.get("contents") or {}
        results = []
        for n in range(min(int(body.get("numResults", 10)), 3)):
            result: dict[str, Any] = {
                "id": f"https://pages.example/{quote(query)}/{n}",
                "url": f"https://pages.example/{quote(query)}/{n}",
                "title": f"{query}, page {n}",
                "publishedDate": f"2026-11-0{n + 1}T00:00:00.000Z",
                "author": f"Author {n}",
                "score": 0.9 - n / 10,
            }
            if "highlights" in contents:
                result["highlights"] = [f"{query} is mentioned on page {n}."]
                result["highlightScores"] = [0.8]
            if "summary" in contents:
                result["summary"] = f"Page {n} is about {query}."
            if contents.get("text"):
                result["text"] = f"The whole text of page {n} about {query}."
            results.append(result)
        return {"requestId": "req-fake", "resolvedSearchType": "neural", "results": results}

    def _contents(self, body: dict[str, Any]) -> dict[str, Any]:
        results, statuses = [], []
        for url in body.get("urls") or []:
            if url in self.known:
                title, text = self.known[url]
                results.append(
                    {
                        "id": url,
                        "url": url,
                        "title": title,
                        "publishedDate": "2026-10-31T00:00:00.000Z",
                        "author": "Known Author",
                        "text": text,
                    }
                )
                statuses.append({"id": url, "status": "success"})
            else:
                statuses.append({"id": url, "status": "error", "error": {"tag": "CRAWL_NOT_FOUND"}})
        return {"requestId": "req-fake", "results": results, "statuses": statuses}


@contextmanager
def serving() -> Iterator[FakeExa]:
    fake = FakeExa()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, answer = fake.answer(self.path, headers, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
