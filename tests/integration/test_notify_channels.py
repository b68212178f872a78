"""Each projection's commits are notified on a channel of its own, and a process LISTENs only
to the projections it waits for and does not follow itself (o_runtime/waiting.py), against
real JetStream and Postgres. What a session listens to is asked of Postgres itself
(`pg_listening_channels()` on the watcher's connection)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import asyncpg
import pytest

from o_contracts.projection_names import SCHEDULES
from o_gateway.read_fence import ReadFence
from o_memory.projections import memory
from o_runtime.eventlog import EventLog
from o_runtime.projector import Projection, Projector, notify_channel
from o_runtime.waiting import ProjectionWatcher
from tests.integration.conftest import renamed, until
from tests.integration.test_projector import create_block, update_block


async def channels(watcher: ProjectionWatcher) -> set[str]:
    """The channels the watcher's session LISTENs to, as Postgres says."""
    # (one query at a time on its connection: the watcher's own lock)
    async with watcher._querying:
        assert watcher._conn is not None
        rows = await watcher._conn.fetch("SELECT pg_listening_channels() AS c")
    return {r["c"] for r in rows}


async def listens_to(watcher: ProjectionWatcher, wanted: set[str]) -> bool:
    return await channels(watcher) == wanted


@dataclass
class Process:
    """A process as the tests see it: its watcher, and projectors started in it (wired to the
    watcher as a service wires its own: o_runtime/service.py) or in another process."""

    eventlog: EventLog
    pool: asyncpg.Pool
    watcher: ProjectionWatcher
    projectors: list[Projector]

    def run(self, projection: Projection, *, here: bool) -> Projector:
        """A projector of `projection`, started (stopped at the test's end)."""
        projector = (
            Projector(
                projection,
                self.pool,
                self.eventlog,
                on_committed=self.watcher.applied,
                on_following=self.watcher.following,
            )
            if here
            else Projector(projection, self.pool, self.eventlog)
        )
        self.projectors.append(projector)
        projector.start()
        return projector

    async def block_waited_for(self, projection: Projection) -> str:
        """A new block, once the watcher has waited for `projection` to apply it: its id."""
        block_id, seq = await create_block(self.eventlog)
        await self.watcher.wait(seq, projection.name, timeout=30)
        return block_id

    async def update_heard(self, projection: Projection, block_id: str) -> None:
        """The block updated; the watcher told of `projection` applying it, not waiting."""
        seq = await update_block(self.eventlog, block_id, 2, "v2")
        await until(lambda: self.watcher.reached(projection.name) >= seq, "the commit heard")


@pytest.fixture
def process(
    eventlog: EventLog, pool: asyncpg.Pool, watcher: ProjectionWatcher, projectors: list[Projector]
) -> Process:
    return Process(eventlog, pool, watcher, projectors)


async def test_a_projection_notifies_on_its_own_channel_only(
    process: Process, database_url: str
) -> None:
    ours, other = renamed(memory), renamed(memory)
    heard: list[tuple[str, str]] = []
    conn = await asyncpg.connect(database_url)
    try:
        for p in (ours, other):
            await conn.add_listener(
                notify_channel(p.name), lambda *a: heard.append((str(a[2]), str(a[3])))
            )
        process.run(ours, here=False)
        _, seq = await create_block(process.eventlog)
        async with asyncio.timeout(30):
            while (notify_channel(ours.name), f"{ours.name}:{seq}") not in heard:
                await conn.execute("SELECT 1")  # (notifications come with an answer)
        # Every notification of a commit made before this round trip has come before it.
        await conn.execute("SELECT 1")
        assert {channel for channel, _ in heard} == {notify_channel(ours.name)}
    finally:
        await conn.close()


def test_a_long_projection_name_still_makes_a_channel_postgres_takes() -> None:
    long_name = "evolution_archive_" + "x" * 80
    channel = notify_channel(long_name)
    assert len(channel.encode()) <= 63
    assert channel != notify_channel(long_name + "y")
    assert notify_channel("runs") == "o_projection.runs"


async def test_a_watcher_listens_only_to_the_projections_it_has_waited_for(
    process: Process,
) -> None:
    waited, never = renamed(memory), renamed(memory)
    for p in (waited, never):
        process.run(p, here=False)
    watcher = process.watcher
    assert await channels(watcher) == set()
    block_id = await process.block_waited_for(waited)
    assert await channels(watcher) == {notify_channel(waited.name)}
    # Later commits of the projection waited for are heard without asking.
    await process.update_heard(waited, block_id)
    assert watcher.listening == {waited.name}


async def test_a_projection_followed_in_the_process_is_not_listened_to(process: Process) -> None:
    projection = renamed(memory)
    process.run(projection, here=True)
    # Told by its own projector (on_committed), however many times it waits.
    block_id = await process.block_waited_for(projection)
    seq = await update_block(process.eventlog, block_id, 2, "v2")
    await process.watcher.wait(seq, projection.name, timeout=30)
    assert await channels(process.watcher) == set()


async def test_once_its_projector_stops_following_the_process_listens_and_hears_the_next(
    process: Process,
) -> None:
    projection = renamed(memory)
    ours = process.run(projection, here=True)
    block_id = await process.block_waited_for(projection)
    assert await channels(process.watcher) == set()
    await ours.stop()  # another replica's projector follows from now on
    channel = {notify_channel(projection.name)}
    await until(lambda: listens_to(process.watcher, channel), "the watcher listens")
    process.run(projection, here=False)
    # Heard by NOTIFY: nobody in this process tells the watcher, and it is not asked.
    await process.update_heard(projection, block_id)


async def test_a_reconnected_watcher_listens_again_to_what_it_waited_for(
    process: Process,
) -> None:
    projection = renamed(memory)
    process.run(projection, here=False)
    block_id = await process.block_waited_for(projection)
    watcher = process.watcher
    assert watcher._conn is not None
    backend = watcher._conn.get_server_pid()
    assert await process.pool.fetchval("SELECT pg_terminate_backend($1)", backend)

    def reconnected() -> bool:
        return watcher._conn is not None and watcher._conn.get_server_pid() != backend

    await until(reconnected, "the watcher connected again")
    assert await channels(watcher) == {notify_channel(projection.name)}
    await process.update_heard(projection, block_id)


async def test_a_watcher_whose_connection_closed_unannounced_connects_again(
    process: Process,
) -> None:
    """asyncpg does not always call a connection's termination listeners (one it aborts
    itself closes without them): a watcher that finds its connection closed connects again
    and reads the checkpoints, where it used to fail every wait on the closed one (a gateway
    answered 503 to every write once Postgres had restarted, in a CI run)."""
    projection = renamed(memory)
    process.run(projection, here=False)
    block_id = await process.block_waited_for(projection)
    watcher = process.watcher
    closed = watcher._conn
    assert closed is not None
    closed.remove_termination_listener(watcher._on_lost)  # as asyncpg may not call it
    backend = closed.get_server_pid()
    assert await process.pool.fetchval("SELECT pg_terminate_backend($1)", backend)
    await until(closed.is_closed, "the connection closed")
    assert watcher._conn is closed  # nobody told the watcher
    # A commit the closed connection cannot bring: the wait reads it from the checkpoints.
    seq = await update_block(process.eventlog, block_id, 2, "v2")
    await watcher.wait(seq, projection.name, timeout=20)
    assert watcher._conn is not None and not watcher._conn.is_closed()
    assert watcher._conn.get_server_pid() != backend
    # And it listens again, so the next commit is heard, not read.
    await until(lambda: watcher.listening == {projection.name}, "listening again")
    await process.update_heard(projection, block_id)


class CountingWatcher(ProjectionWatcher):
    """A watcher that counts its reads of the checkpoints (each one still made): every read
    stamps the time it was made."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.stamps: set[float] = set()

    async def _read_checkpoints(self, conn: asyncpg.Connection, fresh_within: float = 0.0) -> None:
        await super()._read_checkpoints(conn, fresh_within)
        self.stamps.add(self._read_at)


async def test_waiters_that_wait_long_read_the_checkpoints_once_a_second_between_them(
    database_url: str, pool: asyncpg.Pool
) -> None:
    """A wait that lasts reads the checkpoints every second (a notification can be lost with
    its connection); twenty such waits read them about once a second between them, not
    twenty times: a backlog is when waits last, and every read is on one connection.
    (`pool`: the schema.)"""
    watcher = CountingWatcher(database_url)
    await watcher.start()
    try:
        started = len(watcher.stamps)
        # A projection nobody runs: every wait lasts its whole timeout.
        waits = [watcher.wait(10**12, "nobody_projects_this", timeout=3.2) for _ in range(20)]
        outcomes = await asyncio.gather(*waits, return_exceptions=True)
        assert all(isinstance(o, TimeoutError) for o in outcomes)
        # About one a second (three or four in the 3.2 s); one each would be 60 and more.
        reads = len(watcher.stamps) - started
        assert 2 <= reads <= 8, reads
    finally:
        await watcher.stop()


async def test_the_gateways_read_fence_tells_its_watcher_which_then_listens_to_nothing(
    database_url: str, watcher: ProjectionWatcher
) -> None:
    # The gateway's Postgres tells it of each commit once: on the read fence's connection.
    fence = ReadFence(database_url, watcher)
    await fence.start()
    committer = await asyncpg.connect(database_url)
    try:
        seq = watcher.reached(SCHEDULES) + 1000
        # (the task runs up to its wait before the notification's round trip is back)
        waiting = asyncio.create_task(watcher.wait(seq, SCHEDULES, timeout=30))
        await committer.execute(
            "SELECT pg_notify($1, $2)", notify_channel(SCHEDULES), f"{SCHEDULES}:{seq}"
        )
        await waiting
        assert await channels(watcher) == set()

        # Without the fence's connection the watcher listens for itself.
        await fence.stop()
        channel = {notify_channel(SCHEDULES)}
        await until(lambda: listens_to(watcher, channel), "the watcher listens")
        await committer.execute(
            "SELECT pg_notify($1, $2)", notify_channel(SCHEDULES), f"{SCHEDULES}:{seq + 1}"
        )
        await until(lambda: watcher.reached(SCHEDULES) == seq + 1, "the commit heard")
    finally:
        await committer.close()
        await fence.stop()
