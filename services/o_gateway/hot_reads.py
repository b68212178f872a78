"""The hot reads (GET agent, list messages, get run) answered from rendered bytes, exactly.

A GET agent renders from seven queries and FastAPI's routing and serialization: ~1.7 ms of
the gateway's CPU per request on this project's 2-core machine, so ~1,450 requests/s at
most. Those reads are far more frequent than the commits that change them, so the response
(status, headers and body, the bytes FastAPI produced) is kept per path and query string
and sent again as long as no projection has committed since it was rendered.

Exact, not "fresh enough": every request first passes the read fence (read_fence.py),
which returns the number of projection commits this process has heard of once every
commit that finished before the request arrived is among them. A kept response is sent
only if it was rendered after the same fence generation; else the route renders it and
it is kept with the generation its own fence returned (taken before its queries ran, so
the entry is older than or as new as what it shows). Any projection's commit moves the
generation, so a write acknowledged by any gateway replica, a memory tool's edit during a
run, a projection rebuild: each is seen by the next read, as without the cache. Coarse on
purpose: a projection's notification says which projection, not which agent, and one
missed dependency would make a read stale; a busy system renders more, never shows less.

Only the routes in HOT_ROUTES are kept (their responses depend on the path, the query
string and the projections alone: no header, no clock, no caller), only 200s, and at most
`budget` bytes of them (the oldest go first; O_READ_CACHE_BYTES, 32 MiB: what a gateway
process may hold beside its ~100 MB). Inside authentication, CORS and the metrics
middleware: a kept answer is still authenticated, measured by its route template and
traced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from o_gateway.read_fence import ReadFence

# The route templates whose answers may be kept (both forms: with and without the slash).
HOT_ROUTES = frozenset(
    {
        "/v1/agents/{agent_id}",
        "/v1/agents/{agent_id}/",
        "/v1/agents/{agent_id}/messages",
        "/v1/agents/{agent_id}/messages/",
        "/v1/runs/{run_id}",
        "/v1/runs/{run_id}/",
    }
)
# A response larger than this share of the budget is not kept (a long message page:
# rendering it dominates its cost anyway).
MAX_SHARE = 16


@dataclass(frozen=True)
class Kept:
    generation: int
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    route: Any


def hot(path: str) -> bool:
    """Whether `path` has the shape of a HOT_ROUTES path (cheaply: the route that
    answers it decides whether its answer is kept; others only pay a fence)."""
    parts = path.split("/")
    if parts[-1] == "" and len(parts) > 4:
        parts.pop()
    if len(parts) < 4 or parts[1] != "v1" or not parts[3]:
        return False
    if len(parts) == 4:
        return (parts[2] == "agents" and parts[3] != "count") or parts[2] == "runs"
    return len(parts) == 5 and parts[2] == "agents" and parts[4] == "messages"


class HotReads:
    """ASGI middleware: kept answers for HOT_ROUTES, checked against the read fence."""

    def __init__(self, app: ASGIApp, fence: ReadFence | None, budget: int) -> None:
        self.app = app
        self.fence = fence
        self.budget = budget
        self.kept: dict[tuple[str, bytes], Kept] = {}
        # Bytes of the kept bodies.
        self.size = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        fence = self.fence
        if (
            fence is None
            or not self.budget
            or scope["type"] != "http"
            or scope["method"] != "GET"
            or not hot(scope["path"])
        ):
            await self.app(scope, receive, send)
            return
        generation = await fence.fence()
        if generation is None:
            await self.app(scope, receive, send)
            return
        key = (scope["path"], scope["query_string"])
        kept = self.kept.get(key)
        if kept is not None and kept.generation == generation:
            # (Instrumented, outside, measures by the route template.)
            scope["route"] = kept.route
            # (A new start message each time: middleware outside adds headers to it.)
            await send(
                {"type": "http.response.start", "status": kept.status, "headers": kept.headers[:]}
            )
            await send({"type": "http.response.body", "body": kept.body})
            return
        await self._render(scope, receive, send, key, generation)

    async def _render(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        key: tuple[str, bytes],
        generation: int,
    ) -> None:
        start: Message | None = None
        headers: list[tuple[bytes, bytes]] = []
        chunks: list[bytes] = []
        complete = False

        async def keeping(message: Message) -> None:
            nonlocal start, complete, headers
            if message["type"] == "http.response.start":
                start = message
                # A copy: middleware outside adds its headers to the message it is given.
                headers = list(message.get("headers", []))
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                complete = not message.get("more_body", False)
            await send(message)

        await self.app(scope, receive, keeping)
        route = scope.get("route")
        if (
            start is None
            or not complete
            or start["status"] != 200
            or getattr(route, "path", None) not in HOT_ROUTES
        ):
            return
        body = b"".join(chunks)
        if len(body) > self.budget // MAX_SHARE:
            return
        self._forget(key)
        while self.kept and self.size + len(body) > self.budget:
            # The oldest goes (dicts keep insertion order).
            self._forget(next(iter(self.kept)))
        self.kept[key] = Kept(generation, start["status"], headers, body, route)
        self.size += len(body)

    def _forget(self, key: tuple[str, bytes]) -> None:
        gone = self.kept.pop(key, None)
        if gone is not None:
            self.size -= len(gone.body)
