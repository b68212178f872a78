"""Outages answer 503 with `{"detail": ...}` and `Retry-After`, never a plain-text 500 (issue 10).

The gateway's application against a Postgres that is not running (a port nothing
listens on) and a NATS connection that is closed: real clients, real failures.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import asyncpg
import httpx
import nats
import pytest

from o_gateway.app import create_app
from o_gateway.state import Gateway
from o_runtime.eventlog import EventLog
from tests.servers import Servers, operator


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def client(gateway: Gateway) -> httpx.AsyncClient:
    app = create_app(gateway)
    # The server's last resort re-raises after answering: the client sees the answer.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://gateway")


@pytest.fixture(autouse=True)
def no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("O_API_KEY", raising=False)


@pytest.fixture
async def dead_pool() -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(
        f"postgresql://o@127.0.0.1:{unused_port()}/o", min_size=0, max_size=1, timeout=2
    )
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
async def closed_nats(servers: Servers) -> AsyncIterator[EventLog]:
    nc = await nats.connect(servers.nats_url, **operator())
    await nc.close()
    yield EventLog(nc)


def unavailable(response: httpx.Response, what: str) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["retry-after"]) > 0
    assert what in response.json()["detail"]


async def test_postgres_down_is_503_with_retry_after(
    dead_pool: asyncpg.Pool, closed_nats: EventLog
) -> None:
    async with await client(Gateway(closed_nats, dead_pool, None)) as http:  # type: ignore[arg-type]
        unavailable(await http.get("/v1/agents/count"), "unavailable")
        unavailable(await http.get("/v1/agents/"), "unavailable")
        unavailable(
            await http.get("/v1/blocks/block-00000000-0000-4000-8000-000000000000"),
            "unavailable",
        )


async def test_nats_down_is_503_with_retry_after(
    dead_pool: asyncpg.Pool, closed_nats: EventLog
) -> None:
    async with await client(Gateway(closed_nats, dead_pool, None)) as http:  # type: ignore[arg-type]
        # Creating a block is a command to the memory service, over NATS first.
        unavailable(await http.post("/v1/blocks/", json={"label": "x"}), "NATS")


async def test_a_bug_is_a_json_500(closed_nats: EventLog) -> None:
    # No pool at all: an AttributeError in the handler, i.e. a bug.
    async with await client(Gateway(closed_nats, None, None)) as http:  # type: ignore[arg-type]
        response = await http.get("/v1/agents/count")
    assert response.status_code == 500
    assert response.json() == {"detail": "internal server error (AttributeError)"}
