from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from o_devtools.embedded import EmbeddedNats
from o_devtools.supervisor import ServerKeeper
from o_runtime.db import connect_pool
from o_runtime.eventlog import EventLog
from o_runtime.nats_identity import Identity
from o_runtime.projector import Projection, Projector
from o_runtime.waiting import ProjectionWatcher
from tests.servers import Servers


@pytest.fixture
async def eventlog(servers: Servers) -> AsyncIterator[EventLog]:
    log = await EventLog.connect(servers.nats_url, name="test")
    yield log
    await log.close()


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await connect_pool(database_url)
    yield p
    await p.close()


@pytest.fixture
async def watcher(
    database_url: str, pool: asyncpg.Pool, eventlog: EventLog
) -> AsyncIterator[ProjectionWatcher]:
    w = ProjectionWatcher(database_url, eventlog.nc)
    await w.start()
    yield w
    await w.stop()


async def until(
    check: Callable[[], Awaitable[bool] | bool], what: str, within: float = 20.0
) -> None:
    """Poll a real condition (a function, sync or async) until it holds; fail after
    `within` seconds, saying `what` never came."""
    deadline = time.monotonic() + within
    while True:
        outcome = check()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"not within {within}s: {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
async def projectors() -> AsyncIterator[list[Projector]]:
    """Projectors a test starts; stopped at its end whatever happens."""
    started: list[Projector] = []
    yield started
    for p in started:
        await p.stop()


def renamed(projection: Projection) -> Projection:
    """`projection`'s subjects, tables and real handlers under a unique name: each test gets
    a consumer and a checkpoint row of its own."""
    return Projection(
        name=f"{projection.name}_{uuid.uuid4().hex[:8]}",
        filter_subject=projection.filter_subject,
        tables=projection.tables,
        handlers=projection.handlers,
    )


def server_operator(server: EmbeddedNats) -> Identity:
    """The operator's identity on a NATS server of a test's own."""
    return Identity.from_file("operator", server.seed_file("operator"))


@pytest.fixture
async def nats_keeper(tmp_path: Path) -> AsyncIterator[ServerKeeper]:
    """A NATS server of the test's own (in tmp_path), kept up (and restarted) by a keeper."""
    keeper = ServerKeeper(EmbeddedNats(tmp_path))
    await keeper.start()
    try:
        yield keeper
    finally:
        await keeper.stop()
