"""Projectors against real JetStream and Postgres: exactly once, failover, dead letters, rebuild."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Protocol

import asyncpg
import msgpack
import nats.errors
import nats.js.errors
import pytest

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.events import (
    AgentCreated,
    AgentDeleted,
    BlockAttached,
    BlockCreated,
    BlockUpdated,
    RunCancellationRequested,
)
from o_contracts.ids import new_id
from o_contracts.models import BlockSpec
from o_memory.projections import memory
from o_runtime import projector as projector_module
from o_runtime import waiting as waiting_module
from o_runtime.db import migrate
from o_runtime.deferred_writes import DeferredWrites
from o_runtime.eventlog import EventLog
from o_runtime.projector import Outcome, Projection, Projector
from o_runtime.reads import ProjectionReads
from o_runtime.settings import ProjectionSettings
from o_runtime.waiting import ProjectionWatcher
from tests.integration.conftest import renamed


def fresh_memory_projection() -> Projection:
    return renamed(memory)


def with_handler(base: Projection, event_type: type[Any], handler: Any) -> Projection:
    """`base` with a test's own handler for one event type (wrapping the real one)."""
    return Projection(
        name=base.name,
        filter_subject=base.filter_subject,
        tables=base.tables,
        handlers={**base.handlers, event_type.type_name(): handler},
    )


def started(
    projection: Projection,
    pool: asyncpg.Pool,
    eventlog: EventLog,
    projectors: list[Projector],
    settings: ProjectionSettings | None = None,
) -> Projector:
    """A projector following the log (stopped at the test's end by the fixture)."""
    projector = Projector(projection, pool, eventlog, settings=settings)
    projectors.append(projector)
    projector.start()
    return projector


def env(event: Any, aggregate_id: str) -> Envelope[Any]:
    return Envelope.wrap(event, aggregate_id=aggregate_id, producer="test")


async def create_block(log: EventLog, label: str = "human", value: str = "v") -> tuple[str, int]:
    block_id = new_id("block")
    appended = await log.append(
        subjects.block_subject(block_id),
        env(BlockCreated(block_id=block_id, spec=BlockSpec(label=label, value=value)), block_id),
    )
    return block_id, appended.seq


async def three_versions(log: EventLog, second: str) -> tuple[str, int, int]:
    """A block at v1, then `second`, then v3: its id and the last two events' seqs."""
    block_id, _ = await create_block(log, value="v1")
    middle = await update_block(log, block_id, 2, second)
    return block_id, middle, await update_block(log, block_id, 3, "v3")


async def update_block(log: EventLog, block_id: str, version: int, value: str) -> int:
    appended = await log.append(
        subjects.block_subject(block_id),
        env(BlockUpdated(block_id=block_id, version=version, changes={"value": value}), block_id),
    )
    return appended.seq


async def rows(pool: asyncpg.Pool, table: str, order: str) -> list[dict[str, Any]]:
    return [dict(r) for r in await pool.fetch(f"SELECT * FROM {table} ORDER BY {order}")]


async def test_an_event_applied_twice_takes_effect_once(
    eventlog: EventLog, pool: asyncpg.Pool
) -> None:
    projector = Projector(fresh_memory_projection(), pool, eventlog)
    block_id, seq = await create_block(eventlog)
    msg = await eventlog.js.get_msg(subjects.EVENTS_STREAM, seq)
    subject = subjects.block_subject(block_id)
    assert await projector.apply(seq, subject, msg.data or b"") is Outcome.APPLIED
    assert await projector.apply(seq, subject, msg.data or b"") is Outcome.SKIPPED
    versions = await pool.fetch("SELECT * FROM block_versions WHERE block_id = $1", block_id)
    assert len(versions) == 1


async def test_a_projector_tells_its_own_process_what_it_committed(
    eventlog: EventLog, pool: asyncpg.Pool
) -> None:
    # Waiters in the projector's process wake on this, not on the NOTIFY's round trip.
    committed: list[tuple[str, int]] = []
    projection = fresh_memory_projection()
    projector = Projector(
        projection, pool, eventlog, on_committed=lambda name, seq: committed.append((name, seq))
    )
    block_id, seq = await create_block(eventlog)
    msg = await eventlog.js.get_msg(subjects.EVENTS_STREAM, seq)
    subject = subjects.block_subject(block_id)
    assert await projector.apply(seq, subject, msg.data or b"") is Outcome.APPLIED
    assert committed == [(projection.name, seq)]
    assert await projector.apply(seq, subject, msg.data or b"") is Outcome.SKIPPED
    assert committed[-1][1] == seq  # never told anything past what is committed


async def test_a_follower_that_knows_its_checkpoint_applies_an_event_in_one_message(
    eventlog: EventLog, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # BEGIN, the claim, the handler's statements and COMMIT together (deferred_writes.py).
    messages: list[int] = []

    class Counted(DeferredWrites):
        async def commit(self) -> None:
            await super().commit()
            messages.append(self.messages)

    monkeypatch.setattr(projector_module, "DeferredWrites", Counted)
    projector = Projector(fresh_memory_projection(), pool, eventlog)
    for value in ("first", "second"):
        block_id, seq = await create_block(eventlog, value=value)
        msg = await eventlog.js.get_msg(subjects.EVENTS_STREAM, seq)
        subject = subjects.block_subject(block_id)
        assert await projector.apply(seq, subject, msg.data or b"") is Outcome.APPLIED
        assert await versions_of(pool, block_id) == [(1, value)]
    # (the first claims the slow way: a new projector does not know where the checkpoint is)
    assert messages == [1]


async def test_a_follower_whose_checkpoint_was_moved_meanwhile_claims_again(
    eventlog: EventLog, pool: asyncpg.Pool
) -> None:
    projection = fresh_memory_projection()
    projector = Projector(projection, pool, eventlog)
    applied, first = await create_block(eventlog)
    msg = await eventlog.js.get_msg(subjects.EVENTS_STREAM, first)
    await projector.apply(first, subjects.block_subject(applied), msg.data or b"")
    block_id, seq = await create_block(eventlog)
    # Another follower (or a rebuild) applied it meanwhile: this one's claim is lost, it
    # reads the checkpoint and skips what is applied.
    await pool.execute(
        "UPDATE projection_checkpoints SET last_seq = $2 WHERE projection = $1",
        projection.name,
        seq,
    )
    msg = await eventlog.js.get_msg(subjects.EVENTS_STREAM, seq)
    subject = subjects.block_subject(block_id)
    assert await projector.apply(seq, subject, msg.data or b"") is Outcome.SKIPPED
    assert await versions_of(pool, block_id) == []
    assert await versions_of(pool, applied) == [(1, "v")]


class Follow(Protocol):
    def __call__(
        self, projection: Projection, until: int, settings: ProjectionSettings | None = None
    ) -> Awaitable[Projector]: ...


@pytest.fixture
def follow(
    eventlog: EventLog, pool: asyncpg.Pool, watcher: ProjectionWatcher, projectors: list[Projector]
) -> Follow:
    """Start a projector on a projection and wait until it has applied sequence `until`."""

    async def run(
        projection: Projection, until: int, settings: ProjectionSettings | None = None
    ) -> Projector:
        projector = started(projection, pool, eventlog, projectors, settings)
        await watcher.wait(until, projection.name, timeout=30)
        return projector

    return run


async def versions_of(
    pool: asyncpg.Pool | asyncpg.Connection, block_id: str
) -> list[tuple[int, str]]:
    rows = await pool.fetch(
        "SELECT version, value FROM block_versions WHERE block_id = $1 ORDER BY version",
        block_id,
    )
    return [(r["version"], r["value"]) for r in rows]


async def test_two_followers_at_once_apply_each_event_once_in_order(
    eventlog: EventLog, pool: asyncpg.Pool, watcher: ProjectionWatcher
) -> None:
    # As after a partition: both replicas believe they lead and follow the log.
    # The checkpoint row, locked in each batch's transaction, keeps it exactly once.
    projection = fresh_memory_projection()
    # From here on, not from the session's first event: late in a full run the log holds
    # thousands of earlier tests' events, whose replay by two contending followers once
    # outlasted the wait on a loaded machine. What is tested is the pair, not the replay.
    await pool.execute(
        "INSERT INTO projection_checkpoints (projection, last_seq) VALUES ($1, $2)",
        projection.name,
        await eventlog.end(),
    )
    block_id, _ = await create_block(eventlog, value="v1")
    a, b = Projector(projection, pool, eventlog), Projector(projection, pool, eventlog)
    async with pool.acquire() as conn_a, pool.acquire() as conn_b:
        followers = [
            asyncio.create_task(a._follow(conn_a)),
            asyncio.create_task(b._follow(conn_b)),
        ]
        try:
            last = 0
            for version in range(2, 31):
                last = await update_block(eventlog, block_id, version, f"v{version}")
            await watcher.wait(last, projection.name, timeout=30)
        finally:
            for task in followers:
                task.cancel()
            await asyncio.gather(*followers, return_exceptions=True)
    assert await versions_of(pool, block_id) == [(v, f"v{v}") for v in range(1, 31)]
    assert await pool.fetchval("SELECT value FROM blocks WHERE id = $1", block_id) == "v30"


async def test_one_replica_follows_and_another_takes_over_when_it_stops(
    eventlog: EventLog,
    pool: asyncpg.Pool,
    watcher: ProjectionWatcher,
    projectors: list[Projector],
) -> None:
    quick = ProjectionSettings(standby_poll=0.05)
    projection = fresh_memory_projection()
    first = Projector(projection, pool, eventlog, settings=quick)
    second = Projector(projection, pool, eventlog, settings=quick)
    projectors += [first, second]
    first.start()
    block_id, seq = await create_block(eventlog, value="v1")
    await watcher.wait(seq, projection.name, timeout=30)
    second.start()
    holders = await pool.fetchval(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND objid::int = hashtext($1)",
        first.lock_key,
    )
    assert holders == 1

    await first.stop()  # releases the lock: the standby takes over
    seq = await update_block(eventlog, block_id, 2, "v2")
    await watcher.wait(seq, projection.name, timeout=30)
    assert await versions_of(pool, block_id) == [(1, "v1"), (2, "v2")]


async def skipped_events(eventlog: EventLog, count: int) -> int:
    """Append events the memory projection follows but does not handle; the last one's seq."""
    # RunCancellationRequested is on an agent's subject, which the memory
    # projection follows, but it changes no block: only the checkpoint moves.
    agent_id = new_id("agent")
    last = 0
    for _ in range(count):
        event = RunCancellationRequested(run_id=new_id("run"), agent_id=agent_id)
        last = (await eventlog.append(subjects.agent_subject(agent_id), env(event, agent_id))).seq
    return last


async def checkpoint_of(pool: asyncpg.Pool, projection: Projection) -> int:
    seq: int = await pool.fetchval(
        "SELECT last_seq FROM projection_checkpoints WHERE projection = $1", projection.name
    )
    return seq


async def test_a_waiter_moves_the_checkpoint_past_events_the_projection_does_not_handle(
    eventlog: EventLog,
    pool: asyncpg.Pool,
    watcher: ProjectionWatcher,
    projectors: list[Projector],
) -> None:
    # Left alone, the checkpoint would lag an hour behind skipped events: only
    # the waiter's word (ProjectionWatcher.wait publishes it) can move it sooner.
    projection = fresh_memory_projection()
    assert RunCancellationRequested.type_name() not in projection.handlers
    started(projection, pool, eventlog, projectors, ProjectionSettings(skip_lag=3600.0))
    last = await skipped_events(eventlog, 5)
    await watcher.wait(last, projection.name, timeout=30)
    assert await checkpoint_of(pool, projection) == last


def one_block_only(block_id: str) -> Projection:
    """The memory projection following one block's subject only: no other test's event is
    its business, so nothing but its own block's events moves it on by itself."""
    base = fresh_memory_projection()
    return Projection(
        name=base.name,
        filter_subject=subjects.block_subject(block_id),
        tables=base.tables,
        handlers=base.handlers,
    )


async def test_a_waiter_for_an_event_outside_the_projections_subjects_is_answered_at_once(
    eventlog: EventLog,
    pool: asyncpg.Pool,
    watcher: ProjectionWatcher,
    projectors: list[Projector],
    follow: Follow,
) -> None:
    # The agents projection follows agents' own subjects, and a conversation's run appends
    # under them: a run that waited for it at its own last event waited its whole minute
    # (tests/e2e/test_concurrency_policy.py's steered stream took 60 s). No delivery takes
    # a projection there; the log says that none of its events lies in between.
    block_id, created = await create_block(eventlog)
    projection = one_block_only(block_id)
    await follow(projection, created)
    elsewhere = await skipped_events(eventlog, 1)
    await watcher.wait(elsewhere, projection.name, timeout=5)
    assert await checkpoint_of(pool, projection) >= elsewhere


async def test_the_log_says_whether_a_projection_has_an_event_past_a_position(
    eventlog: EventLog, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the answer above rests on: an event of the projection's own that it has not
    # applied yet (here: not following at all) keeps it where it is.
    block_id, created = await create_block(eventlog, value="v1")
    projector = Projector(one_block_only(block_id), pool, eventlog)
    updated = await update_block(eventlog, block_id, 2, "v2")
    elsewhere = await skipped_events(eventlog, 1)
    end, past = await projector._past_own_events(created)
    assert end >= elsewhere and not past
    end, past = await projector._past_own_events(updated)
    assert end >= elsewhere and past

    # NATS away: no answer, and the projector stays where it is (the waiter asks again).
    async def unreachable() -> int:
        raise nats.errors.NoServersError

    monkeypatch.setattr(eventlog, "end", unreachable)
    assert await projector._past_own_events(updated) == (updated, False)


async def test_a_waiter_for_an_event_the_projection_applies_does_not_ask_for_it(
    eventlog: EventLog,
    pool: asyncpg.Pool,
    watcher: ProjectionWatcher,
    projectors: list[Projector],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each ask is a message to the projector: a run's end, which the runs projection
    # applies anyway, is waited for without one (o_runtime/waiting.py, ASK_AFTER).
    # (A pause long enough for this machine's slowest commit: the first wait must not ask.)
    monkeypatch.setattr(waiting_module, "ASK_AFTER", 2.0)
    projection = fresh_memory_projection()
    head = (await eventlog.js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    await pool.execute(
        "INSERT INTO projection_checkpoints (projection, last_seq) VALUES ($1, $2)",
        projection.name,
        head,
    )
    # Following before the first event: the first wait must not outlast ASK_AFTER because the
    # projector was still starting.
    following = asyncio.Event()
    projector = Projector(
        projection,
        pool,
        eventlog,
        settings=ProjectionSettings(skip_lag=3600.0),
        on_following=lambda _, yes: following.set() if yes else None,
    )
    projectors.append(projector)
    projector.start()
    async with asyncio.timeout(30):
        await following.wait()
    asked: list[bytes] = []

    async def heard(msg: Any) -> None:
        asked.append(msg.data)

    asks = await eventlog.nc.subscribe(
        subjects.projection_wanted_subject(projection.name), cb=heard
    )
    try:
        _, seq = await create_block(eventlog)
        await watcher.wait(seq, projection.name, timeout=30, applies=True)
        # One it does not apply is still asked for, after the pause (else an hour's lag).
        last = await skipped_events(eventlog, 1)
        await watcher.wait(last, projection.name, timeout=30, applies=True)
        await eventlog.nc.flush()
    finally:
        await asks.unsubscribe()
    # (Asked again, should the projector take over ASK_AGAIN to answer: the same sequence.)
    assert set(asked) == {b"%d" % last}
    assert await checkpoint_of(pool, projection) == last


async def test_unwatched_skipped_events_move_the_checkpoint_after_the_lag(
    database_url: str,
    eventlog: EventLog,
    pool: asyncpg.Pool,
    projectors: list[Projector],
) -> None:
    projection = fresh_memory_projection()
    started(projection, pool, eventlog, projectors, ProjectionSettings(skip_lag=0.05))
    last = await skipped_events(eventlog, 5)
    silent = ProjectionWatcher(database_url)  # no NATS: it asks no one to hurry
    await silent.start()
    try:
        await silent.wait(last, projection.name, timeout=30)
    finally:
        await silent.stop()
    assert await checkpoint_of(pool, projection) == last


async def dead_letters_of(eventlog: EventLog, projection: Projection) -> dict[int, str]:
    """Origin sequence -> reason of every event the projection dead-lettered.

    (A fresh projection follows the whole shared stream: it also meets what
    other tests left there on purpose, such as bytes that are not MessagePack.)
    """
    subject = subjects.dead_letter_subject(f"projection-{projection.name}")
    found: dict[int, str] = {}
    try:
        await eventlog.js.get_last_msg(subjects.DEAD_LETTER_STREAM, subject)
    except nats.js.errors.NotFoundError:
        return found
    sub = await eventlog.js.subscribe(
        subject, stream=subjects.DEAD_LETTER_STREAM, ordered_consumer=True
    )
    try:
        while True:
            m = await sub.next_msg(timeout=5)
            assert m.headers is not None
            found[int(m.headers["O-Origin-Seq"])] = m.headers["O-Reason"]
            if m.metadata.num_pending == 0:
                return found
    finally:
        await sub.unsubscribe()


async def test_an_event_no_handler_can_apply_is_dead_lettered_at_once_and_the_rest_applied(
    eventlog: EventLog, pool: asyncpg.Pool, follow: Follow
) -> None:
    base = fresh_memory_projection()
    block_id, poison, last = await three_versions(eventlog, "poison")
    attempts = []
    real = base.handlers[BlockUpdated.type_name()]

    async def fragile(conn: asyncpg.Connection, rec: Any) -> None:
        if rec.seq == poison:
            attempts.append(rec.seq)
            # What Postgres says of a value it cannot store (e.g. a NUL in text).
            await conn.execute("SELECT convert_from('\\x00'::bytea, 'UTF8')")
        await real(conn, rec)

    projection = with_handler(base, BlockUpdated, fragile)
    await follow(projection, last)

    # Tried alone once (and once before, if it first came in a batch): trying
    # again cannot help, and the projection's other events must not wait.
    assert set(attempts) == {poison}
    assert 1 <= len(attempts) <= 2
    assert await pool.fetchval("SELECT value FROM blocks WHERE id = $1", block_id) == "v3"
    assert "CharacterNotInRepertoireError" in (await dead_letters_of(eventlog, projection))[poison]


async def test_an_event_that_fails_for_a_passing_reason_is_tried_again(
    eventlog: EventLog, pool: asyncpg.Pool, follow: Follow
) -> None:
    base = fresh_memory_projection()
    block_id, unlucky, last = await three_versions(eventlog, "v2")
    attempts = []
    real = base.handlers[BlockUpdated.type_name()]

    async def contended(conn: asyncpg.Connection, rec: Any) -> None:
        if rec.seq == unlucky and len(attempts) < 3:
            attempts.append(rec.seq)
            raise asyncpg.DeadlockDetectedError("deadlock detected")
        await real(conn, rec)

    projection = with_handler(base, BlockUpdated, contended)
    await follow(projection, last, ProjectionSettings(retry_delay=0.01))
    assert len(attempts) == 3
    assert await versions_of(pool, block_id) == [(1, "v1"), (2, "v2"), (3, "v3")]


async def test_a_rebuild_skips_what_the_live_projection_dead_lettered(
    eventlog: EventLog, pool: asyncpg.Pool, follow: Follow
) -> None:
    base = fresh_memory_projection()
    block_id, poison, last = await three_versions(eventlog, "poison")
    real = base.handlers[BlockUpdated.type_name()]

    async def fragile(conn: asyncpg.Connection, rec: Any) -> None:
        if rec.seq == poison:
            await conn.execute("SELECT convert_from('\\x00'::bytea, 'UTF8')")
        await real(conn, rec)

    projection = with_handler(base, BlockUpdated, fragile)
    await follow(projection, last)
    live = await versions_of(pool, block_id)
    rebuilt = await Projector(projection, pool, eventlog).rebuild()
    assert poison in rebuilt.skipped
    assert await versions_of(pool, block_id) == live == [(1, "v1"), (3, "v3")]


async def test_losing_postgres_mid_event_is_not_the_events_fault(
    eventlog: EventLog, pool: asyncpg.Pool, follow: Follow
) -> None:
    # The handler's session is cut more often than an event may fail: the
    # follower starts over from the checkpoint each time, and nothing is
    # dead-lettered or applied twice.
    base = fresh_memory_projection()
    block_id, cut, last = await three_versions(eventlog, "v2")
    cuts = []
    real = base.handlers[BlockUpdated.type_name()]

    async def unlucky(conn: asyncpg.Connection, rec: Any) -> None:
        await real(conn, rec)
        if rec.seq == cut and len(cuts) <= projector_module.MAX_ATTEMPTS:
            cuts.append(rec.seq)
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    projection = with_handler(base, BlockUpdated, unlucky)
    await follow(projection, last, ProjectionSettings(standby_poll=0.01))
    assert len(cuts) == projector_module.MAX_ATTEMPTS + 1
    assert await versions_of(pool, block_id) == [(1, "v1"), (2, "v2"), (3, "v3")]
    assert cut not in await dead_letters_of(eventlog, projection)


async def test_projection_transactions_commit_asynchronously(
    eventlog: EventLog, pool: asyncpg.Pool, watcher: ProjectionWatcher, projectors: list[Projector]
) -> None:
    # The log is the write-ahead log: a projection's commit need not wait for a flush.
    base = fresh_memory_projection()
    seen = []
    created = BlockCreated.type_name()

    async def observed(conn: asyncpg.Connection, rec: Any) -> None:
        seen.append(await conn.fetchval("SHOW synchronous_commit"))
        await base.handlers[created](conn, rec)

    projection = with_handler(base, BlockCreated, observed)
    started(projection, pool, eventlog, projectors)
    _, first = await create_block(eventlog)
    await watcher.wait(first, projection.name, timeout=30)
    _, second = await create_block(eventlog)  # (the follower now knows the checkpoint)
    await watcher.wait(second, projection.name, timeout=30)
    # (earlier tests' blocks too: a fresh projection follows the log from its start)
    assert len(seen) >= 2 and set(seen) == {"off"}
    assert await pool.fetchval("SHOW synchronous_commit") == "on"  # others' sessions unchanged


async def test_a_watcher_reconnects_when_its_connection_is_lost(
    eventlog: EventLog,
    pool: asyncpg.Pool,
    watcher: ProjectionWatcher,
    projectors: list[Projector],
) -> None:
    projection = fresh_memory_projection()
    started(projection, pool, eventlog, projectors)
    block_id, seq = await create_block(eventlog, value="v1")
    await watcher.wait(seq, projection.name, timeout=30)
    assert watcher._conn is not None
    backend = watcher._conn.get_server_pid()
    assert await pool.fetchval("SELECT pg_terminate_backend($1)", backend)
    # Told nothing by this process's projector (it runs without on_committed):
    # only a reconnected LISTEN can bring the news.
    seq = await update_block(eventlog, block_id, 2, "v2")
    await watcher.wait(seq, projection.name, timeout=30)
    assert watcher._conn is not None and watcher._conn.get_server_pid() != backend


async def test_a_malformed_event_is_dead_lettered_and_the_consumer_goes_on(
    eventlog: EventLog,
    pool: asyncpg.Pool,
    watcher: ProjectionWatcher,
    projectors: list[Projector],
) -> None:
    projection = fresh_memory_projection()
    bad_subject = subjects.block_subject(new_id("block"))
    bad = await eventlog.js.publish(bad_subject, b"\xc1 not msgpack", stream=subjects.EVENTS_STREAM)
    unknown = await eventlog.js.publish(
        bad_subject,
        msgpack.packb(
            {
                "id": "x",
                "type": "NoSuchEvent",
                "v": 1,
                "aggregate_id": "a",
                "time": "2026-01-01T00:00:00Z",
                "producer": "p",
                "data": {},
            }
        ),
        stream=subjects.EVENTS_STREAM,
    )
    block_id, good = await create_block(eventlog, value="after the bad ones")
    projectors.append(Projector(projection, pool, eventlog))
    projectors[0].start()
    await watcher.wait(good, projection.name, timeout=30)

    assert await pool.fetchval("SELECT value FROM blocks WHERE id = $1", block_id) == (
        "after the bad ones"
    )
    seen = await dead_letters_of(eventlog, projection)
    assert "not MessagePack" in seen[bad.seq]
    assert "unknown message type 'NoSuchEvent'" in seen[unknown.seq]


async def test_rebuild_gives_the_same_rows(
    eventlog: EventLog,
    pool: asyncpg.Pool,
    watcher: ProjectionWatcher,
    projectors: list[Projector],
) -> None:
    projection = fresh_memory_projection()
    projector = started(projection, pool, eventlog, projectors)
    human, _ = await create_block(eventlog, "human", "Sam")
    persona, _ = await create_block(eventlog, "persona", "helpful")
    await update_block(eventlog, human, 2, "Sam, likes tea")
    agent_id = new_id("agent")
    agent_subject = subjects.agent_subject(agent_id)
    await eventlog.append(
        agent_subject,
        env(
            AgentCreated(
                agent_id=agent_id,
                name="a",
                system="",
                agent_type="letta_v1_agent",
                llm_config={"model": "m"},
                block_ids=[human],
            ),
            agent_id,
        ),
    )
    await eventlog.append(
        agent_subject, env(BlockAttached(agent_id=agent_id, block_id=persona), agent_id)
    )
    other = new_id("agent")
    await eventlog.append(
        subjects.agent_subject(other),
        env(
            AgentCreated(
                agent_id=other,
                name="b",
                system="",
                agent_type="letta_v1_agent",
                llm_config={"model": "m"},
                block_ids=[human],
            ),
            other,
        ),
    )
    last = (
        await eventlog.append(
            subjects.agent_subject(other), env(AgentDeleted(agent_id=other), other)
        )
    ).seq
    await watcher.wait(last, projection.name, timeout=30)

    tables = {
        "blocks": "id",
        "block_versions": "block_id, version",
        "agent_blocks": "agent_id, position",
    }
    before = {t: await rows(pool, t, o) for t, o in tables.items()}
    assert [r["block_id"] for r in before["agent_blocks"] if r["agent_id"] == agent_id] == [
        human,
        persona,
    ]
    # The deleted agent's attachment went; the shared block it used did not.
    assert not [r for r in before["agent_blocks"] if r["agent_id"] == other]
    assert human in {r["id"] for r in before["blocks"]}

    rebuilt = await projector.rebuild()
    after = {t: await rows(pool, t, o) for t, o in tables.items()}
    assert rebuilt.replayed >= 7
    assert after == before
    checkpoint = await pool.fetchval(
        "SELECT last_seq FROM projection_checkpoints WHERE projection = $1", projection.name
    )
    assert checkpoint >= last


async def test_migrations_run_once(database_url: str, pool: asyncpg.Pool) -> None:
    assert await migrate(database_url) == []
    names = await pool.fetch("SELECT name FROM schema_migrations ORDER BY name")
    assert [r["name"] for r in names][:1] == ["0001_runtime.sql"]
    assert await pool.fetchval("SELECT extname FROM pg_extension WHERE extname = 'vector'")


async def lose_last_commit(pool: asyncpg.Pool, projection: Projection, block_id: str) -> None:
    """What a Postgres crash leaves when it loses the projection's last (v3) commit."""
    async with pool.acquire() as conn, conn.transaction():
        v3 = await conn.fetchval(
            "SELECT seq FROM block_versions WHERE block_id = $1 AND version = 3", block_id
        )
        await conn.execute(
            "DELETE FROM block_versions WHERE block_id = $1 AND version = 3", block_id
        )
        await conn.execute("UPDATE blocks SET value = 'v2', version = 2 WHERE id = $1", block_id)
        await conn.execute(
            "UPDATE projection_checkpoints SET last_seq = $2 WHERE projection = $1",
            projection.name,
            v3 - 1,
        )


async def test_events_whose_commits_postgres_lost_are_applied_again_not_skipped(
    eventlog: EventLog, pool: asyncpg.Pool, watcher: ProjectionWatcher, follow: Follow
) -> None:
    projection = fresh_memory_projection()
    block_id, _, v3 = await three_versions(eventlog, "v2")
    await follow(projection, v3)
    await lose_last_commit(pool, projection, block_id)
    # The follower, which left the checkpoint at v3, meets the next event: it must
    # not claim past the lost one, but follow again from where Postgres is.
    v4 = await update_block(eventlog, block_id, 4, "v4")
    await watcher.wait(v4, projection.name, timeout=30)
    assert await versions_of(pool, block_id) == [(1, "v1"), (2, "v2"), (3, "v3"), (4, "v4")]


async def test_a_follower_whose_session_ends_follows_again_at_once(
    eventlog: EventLog, pool: asyncpg.Pool, watcher: ProjectionWatcher, follow: Follow
) -> None:
    projection = fresh_memory_projection()
    block_id, _, v3 = await three_versions(eventlog, "v2")
    await follow(projection, v3)
    await lose_last_commit(pool, projection, block_id)
    # As in a crash, every session ends (the watcher's too: it reads the checkpoint again).
    await pool.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    # (the watcher may not have heard of the crash yet: a checked read)
    async with ProjectionReads(pool, watcher).at(v3, projection.name, timeout=30) as conn:
        assert await versions_of(conn, block_id) == [(1, "v1"), (2, "v2"), (3, "v3")]
