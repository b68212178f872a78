"""HotReads' decisions: which paths it considers, when a kept answer is sent again, what
is kept (o_gateway/hot_reads.py). The fence here is a counter the test moves; the real
one is tested against Postgres (tests/integration/test_read_fence.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from o_gateway.hot_reads import HotReads, hot


@dataclass
class Route:
    path: str


@dataclass
class Fence:
    generation: int | None = 1

    async def fence(self) -> int | None:
        return self.generation


@dataclass
class App:
    """Answers every request with its count, as the route `template`, with `status`."""

    template: str = "/v1/agents/{agent_id}"
    status: int = 200
    calls: int = 0
    chunks: int = 1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        scope["route"] = Route(self.template)
        body = b'{"n": %d}' % self.calls
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        for i in range(self.chunks):
            more = i < self.chunks - 1
            await send({"type": "http.response.body", "body": body, "more_body": more})


@dataclass
class Client:
    middleware: HotReads
    sent: list[Message] = field(default_factory=list)

    async def get(self, path: str, query: bytes = b"", method: str = "GET") -> tuple[Any, ...]:
        scope: dict[str, Any] = {
            "type": "http",
            "method": method,
            "path": path,
            "query_string": query,
            "headers": [],
        }
        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)
            if message["type"] == "http.response.start":
                # As Instrumented does: a header added to the message it is given.
                message["headers"].append((b"server-timing", b"app;dur=1"))

        async def receive() -> Message:
            return {"type": "http.request", "body": b""}

        await self.middleware(scope, receive, send)
        start, *bodies = sent
        body = b"".join(m.get("body", b"") for m in bodies)
        return start["status"], start["headers"], body, getattr(scope.get("route"), "path", None)


def client(app: App, fence: Fence | None, budget: int = 10_000) -> Client:
    return Client(HotReads(app, fence, budget))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "considered"),
    [
        ("/v1/agents/agent-1", True),
        ("/v1/agents/agent-1/", True),
        ("/v1/agents/agent-1/messages", True),
        ("/v1/agents/agent-1/messages/", True),
        ("/v1/runs/run-1", True),
        ("/v1/runs/run-1/", True),
        ("/v1/agents/", False),
        ("/v1/agents/count", False),
        ("/v1/agents/agent-1/tools", False),
        ("/v1/agents/agent-1/messages/stream", False),
        ("/v1/runs/", False),
        ("/v1/runs/run-1/steps", False),
        ("/v2/agents/agent-1", False),
    ],
)
def test_only_paths_shaped_like_the_hot_reads_are_considered(path: str, considered: bool) -> None:
    assert hot(path) is considered


async def test_a_kept_answer_is_sent_while_the_generation_holds() -> None:
    app, fence = App(), Fence()
    c = client(app, fence)
    first = await c.get("/v1/agents/agent-1")
    second = await c.get("/v1/agents/agent-1")
    assert (
        first
        == second
        == (
            200,
            [(b"content-type", b"application/json"), (b"server-timing", b"app;dur=1")],
            b'{"n": 1}',
            "/v1/agents/{agent_id}",
        )
    )
    assert app.calls == 1


async def test_a_commit_heard_of_renders_the_answer_again() -> None:
    app, fence = App(), Fence()
    c = client(app, fence)
    await c.get("/v1/agents/agent-1")
    fence.generation = 2
    assert (await c.get("/v1/agents/agent-1"))[2] == b'{"n": 2}'
    assert (await c.get("/v1/agents/agent-1"))[2] == b'{"n": 2}'
    assert app.calls == 2


async def test_without_a_fence_answer_every_read_is_rendered() -> None:
    app, fence = App(), Fence(generation=None)
    c = client(app, fence)
    bodies = [(await c.get("/v1/agents/agent-1"))[2] for _ in range(3)]
    assert bodies == [b'{"n": 1}', b'{"n": 2}', b'{"n": 3}']


async def test_answers_are_kept_per_path_and_query_string() -> None:
    app = App(template="/v1/agents/{agent_id}/messages")
    c = client(app, Fence())
    a = await c.get("/v1/agents/agent-1/messages", b"limit=1")
    b = await c.get("/v1/agents/agent-1/messages", b"limit=2")
    again = await c.get("/v1/agents/agent-1/messages", b"limit=1")
    assert (a[2], b[2], again[2]) == (b'{"n": 1}', b'{"n": 2}', b'{"n": 1}')


@pytest.mark.parametrize(
    ("app", "method"),
    [
        (App(status=404), "GET"),
        (App(template="/v1/agents/{agent_id}/other"), "GET"),
        (App(), "HEAD"),
    ],
)
async def test_what_is_not_a_hot_read_answered_200_is_never_kept(app: App, method: str) -> None:
    c = client(app, Fence())
    await c.get("/v1/agents/agent-1", method=method)
    await c.get("/v1/agents/agent-1", method=method)
    assert app.calls == 2


async def test_a_streamed_body_is_kept_whole() -> None:
    app = App(chunks=3)
    c = client(app, Fence())
    first = await c.get("/v1/runs/run-1")
    second = await c.get("/v1/runs/run-1")
    assert first[2] == second[2] == b'{"n": 1}' * 3
    assert app.calls == 1


async def test_the_oldest_answers_go_when_the_budget_is_spent() -> None:
    app = App()
    # Bodies of 8 bytes ({"n": 1} to {"n": 9}), then 9: 18 answers need 153 bytes.
    c = client(app, Fence(), budget=144)
    for i in range(18):
        await c.get(f"/v1/agents/a{i}")
    kept = [path for path, _ in c.middleware.kept]
    assert kept == [f"/v1/agents/a{i}" for i in range(2, 18)]
    assert c.middleware.size == 7 * 8 + 9 * 9 == 137
    await c.get("/v1/agents/a0")
    assert app.calls == 19


async def test_an_answer_over_a_sixteenth_of_the_budget_is_not_kept() -> None:
    app = App()
    c = client(app, Fence(), budget=16 * 8 - 1)
    await c.get("/v1/agents/a")
    await c.get("/v1/agents/a")
    assert app.calls == 2 and c.middleware.size == 0


async def test_a_zero_budget_turns_keeping_off() -> None:
    app = App()
    c = client(app, Fence(), budget=0)
    await c.get("/v1/agents/a")
    await c.get("/v1/agents/a")
    assert app.calls == 2
