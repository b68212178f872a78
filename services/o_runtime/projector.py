"""Projectors: Postgres read models built from the log, each event applied exactly once.

A projector follows the log with an ordered consumer (the server pushes
events in stream order; no acks, no fetch round trips) and applies what has
arrived in batches: in one transaction it locks its checkpoint row, applies
the events past the checkpoint, advances the checkpoint to the batch's end
and notifies waiters. Exactly once comes from that transaction alone: an
event at or below the checkpoint is skipped, whoever delivers it again.

Projection transactions commit asynchronously (synchronous_commit off): the
log is the write-ahead log and projections are derived from it, so waiting
for Postgres to flush each commit (~0.25-0.5 ms here) buys nothing. If
Postgres crashes and loses the last commits, it loses them whole, checkpoint
included (WAL order); every session is cut, so followers start over from the
checkpoint Postgres kept and apply those events again, and watchers forget
what they were told (waiting.py).

Several replicas of a service may run the same projection; a Postgres
advisory lock picks one to follow the log (the others stand by and take
over within `standby_poll` seconds of its death, since Postgres drops a dead
session's locks). Two leaders at once (a partition) would waste work, never
apply an event twice: both go through the same checkpoint row.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar, cast

import asyncpg
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from o_contracts import subjects
from o_contracts.base import Message
from o_contracts.envelope import Envelope, MalformedMessage, decode, known_type
from o_runtime.dead_letters import dead_letter
from o_runtime.deferred_writes import ClaimLost, DeferredWrites
from o_runtime.event_tap import EventTap
from o_runtime.eventlog import EventLog, RawEvent, Recorded
from o_runtime.instruments import measured
from o_runtime.outages import is_outage
from o_runtime.settings import ProjectionSettings
from o_runtime.tracing import continued

log = logging.getLogger(__name__)

NOTIFY_CHANNEL = "o_projection"
# Postgres' longest identifier (NAMEDATALEN - 1 bytes): a channel's name must fit.
_LONGEST_CHANNEL = 63


def notify_channel(projection: str) -> str:
    """The channel a projection's commits are notified on: one per projection, so that a
    process is woken (and, over TLS, sent a record) only by the projections it waits for
    (o_runtime/waiting.py), not by every commit of every projection."""
    channel = f"{NOTIFY_CHANNEL}.{projection}"
    if len(channel.encode()) <= _LONGEST_CHANNEL:
        return channel
    return f"{NOTIFY_CHANNEL}.{hashlib.sha256(projection.encode()).hexdigest()[:40]}"


# An event whose handler fails for a passing reason (a deadlock, a lock or
# statement timeout) is tried again this many times before it is dead-lettered.
# A failure that is the event's own fault (a value Postgres cannot store, a bug
# in a handler) comes back on every try: it is dead-lettered at once, so one
# poison event never holds up the projection's other writes (it held them for
# ~15 s when every failure was retried with backoff; issue 10). Postgres or the
# connection in trouble is never an event's fault: the follower starts over
# from its checkpoint (see its_fault).
MAX_ATTEMPTS = 5
# Events applied in one transaction at most (more wait for the next one).
MAX_BATCH = 500
# How soon a follower tries again when Postgres was unreachable (a restarted
# Postgres is back in ~0.1-0.3 s under make run's supervisor).
RECONNECT_DELAY = 0.25
# An idle follower checks this often that it still holds its lock.
IDLE_CHECK = 5.0
# (How often a standby polls, how soon a failure is retried and how long a
# checkpoint may lag: ProjectionSettings, o_runtime/settings.py.)

# Postgres being unreachable is no fault of an event: the follower starts over
# (from the checkpoint) instead of counting it towards dead-lettering.
CONNECTION_LOST = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    OSError,
)

# Failures that may pass if the event is applied again a moment later.
PASSING = (
    asyncpg.TransactionRollbackError,  # serialization failure, deadlock
    asyncpg.LockNotAvailableError,
    asyncpg.QueryCanceledError,  # statement or lock timeout
)
# What Postgres says when the event itself is the trouble, whatever its state:
# a value it cannot store (class 22), a broken constraint (23), a statement the
# handler got wrong (42), a row too large (54).
EVENTS_FAULT = (
    asyncpg.DataError,
    asyncpg.IntegrityConstraintViolationError,
    asyncpg.SyntaxOrAccessError,
    asyncpg.ProgramLimitExceededError,
)


class CheckpointRegressed(Exception):
    """The checkpoint is behind where this follower left it: Postgres lost commits.

    After a crash, Postgres keeps its asynchronous commits only up to the last
    WAL flush: the projection's latest changes are gone, checkpoint included.
    The events they applied must be applied again, so the follower starts over
    from the checkpoint Postgres kept. Claiming or advancing past it instead
    would skip those events for good (the projection would no longer match the
    log; a rebuild after chaos differed).
    """


def its_fault(exc: BaseException) -> bool:
    """Whether applying the event again could never help (then it is dead-lettered).

    Postgres or the client in trouble (a crash and its aftermath: "another
    operation is in progress", a shutdown, resources) is not: after Postgres
    crashed, good events were dead-lettered for it, and the projection no
    longer matched the log.
    """
    if isinstance(exc, CheckpointRegressed):
        return False
    if isinstance(exc, EVENTS_FAULT):
        return True
    if isinstance(
        exc, asyncpg.PostgresError | asyncpg.InterfaceError | asyncpg.InternalClientError
    ):
        return False
    # A handler's own error (Python's): it would fail again.
    return not is_outage(exc)


class _Reconnected:
    """Put in a follower's queue when its NATS connection came back."""


_RECONNECTED = _Reconnected()


class _LockLost:
    """Put in a follower's queue when the connection holding its lock is gone."""


_LOCK_LOST = _LockLost()


# Lock the checkpoint row (creating it at 0) and read it, for a rebuild.
_LOCK_CHECKPOINT = (
    "INSERT INTO projection_checkpoints AS c (projection, last_seq) VALUES ($1, 0)"
    " ON CONFLICT (projection) DO UPDATE SET last_seq = c.last_seq RETURNING last_seq"
)
# A batch's first statement: lock the checkpoint row, advance it to the batch's
# end and say where it stood (events at or below that are applied already),
# and notify waiters (delivered only if the transaction commits). After a lock
# wait, ON CONFLICT sees the row as the other transaction committed it.
_CLAIM = (
    "WITH claimed AS ("
    " INSERT INTO projection_checkpoints AS c (projection, last_seq, previous_seq)"
    " VALUES ($1, $2, 0) ON CONFLICT (projection) DO UPDATE"
    " SET previous_seq = c.last_seq, last_seq = greatest(c.last_seq, EXCLUDED.last_seq),"
    " updated_at = now() RETURNING previous_seq, last_seq)"
    " SELECT previous_seq, pg_notify($3, $1::text || ':' || last_seq::text) FROM claimed"
)
# For a projection's transaction (see the module docstring).
_ASYNC_COMMIT = "SET LOCAL synchronous_commit TO off"
# Advance the checkpoint only past it (a redelivery finds no row) and notify
# waiters, in one round trip.
_ADVANCE = (
    "WITH advanced AS ("
    " INSERT INTO projection_checkpoints AS c (projection, last_seq) VALUES ($1, $2)"
    " ON CONFLICT (projection) DO UPDATE SET last_seq = EXCLUDED.last_seq, updated_at = now()"
    " WHERE c.last_seq < EXCLUDED.last_seq AND c.last_seq >= $4 RETURNING last_seq)"
    " SELECT last_seq, pg_notify($3, $1::text || ':' || $2::bigint::text) FROM advanced"
)

Handler = Callable[[asyncpg.Connection, Recorded], Awaitable[None]]
E = TypeVar("E", bound=Message)
# A projection's handler for one event type: the typed event, and where it stands in the log.
EventHandler = Callable[[asyncpg.Connection, E, Recorded], Awaitable[None]]


def assignments(changes: Mapping[str, object], columns: Iterable[str], args: list[object]) -> str:
    """`, "column" = $n` for each of `columns` present in `changes`, values appended to `args`.

    For PATCH-like events that carry only what changed; columns are quoted
    because some are SQL keywords (`limit`).
    """
    out = []
    for column in columns:
        if column in changes:
            args.append(changes[column])
            out.append(f', "{column}" = ${len(args)}')
    return "".join(out)


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild did: events replayed, and the sequences of those it had to skip."""

    replayed: int
    skipped: list[int]


class Outcome(Enum):
    APPLIED = "applied"
    SKIPPED = "skipped"
    DEAD_LETTERED = "dead_lettered"


@dataclass
class Projection:
    """What a projection is: its name, the events it reads, its tables, its handlers."""

    name: str
    filter_subject: str
    tables: list[str]
    handlers: dict[str, Handler] = field(default_factory=dict)

    def on(self, event_type: type[E]) -> Callable[[EventHandler[E]], EventHandler[E]]:
        """Register `fn(conn, event, recorded)` for events of `event_type`."""

        def register(fn: EventHandler[E]) -> EventHandler[E]:
            async def handle(conn: asyncpg.Connection, rec: Recorded) -> None:
                # Dispatch is by the wire type name, which decode() resolved to
                # exactly this class: the cast cannot be wrong.
                await fn(conn, cast(E, rec.envelope.data), rec)

            self.handlers[event_type.type_name()] = handle
            return fn

        return register


def raw_event(msg: Msg) -> RawEvent:
    return RawEvent(msg.metadata.sequence.stream, msg.subject, msg.data, msg.headers)


def _literal(text: str) -> str:
    """A SQL string literal (standard_conforming_strings: only quotes need doubling)."""
    return "'" + text.replace("'", "''") + "'"


class Projector:
    def __init__(
        self,
        projection: Projection,
        pool: asyncpg.Pool,
        eventlog: EventLog,
        on_committed: Callable[[str, int], None] | None = None,
        settings: ProjectionSettings | None = None,
        tap: EventTap | None = None,
        on_following: Callable[[str, bool], None] | None = None,
    ) -> None:
        self.projection = projection
        self.settings = settings or ProjectionSettings()
        self.pool = pool
        self.eventlog = eventlog
        # Told (projection name, sequence) after each commit: waiters in this
        # process wake without waiting for the NOTIFY to come back from Postgres.
        self.on_committed = on_committed
        # Told every event as it arrives, while this projector follows (event_tap.py).
        self.tap = tap
        # Told (projection name, True) when this projector starts following the log and
        # (name, False) when it stops: while it follows, on_committed hears of every commit
        # and this process's waiters need no NOTIFY for it (waiting.py).
        self.on_following = on_following
        self._task: asyncio.Task[None] | None = None
        # Where this projector last left the checkpoint (None: it does not know).
        self._at: int | None = None
        # The highest checkpoint this follower has seen or committed: it never
        # moves the checkpoint on from below it (CheckpointRegressed).
        self._floor = 0
        self._attributes = {"projection": projection.name}

    @property
    def name(self) -> str:
        return self.projection.name

    @property
    def lock_key(self) -> str:
        return f"projection:{self.name}"

    # -- following the log ------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"projection {self.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                async with self._leadership() as lock_conn:
                    # Again after each reconnection to NATS; a lost lock ends it.
                    while await self._follow(lock_conn):
                        pass
            except asyncio.CancelledError:
                raise
            except CheckpointRegressed as exc:
                log.warning("projection %s: %s; following again from there", self.name, exc)
            except (*CONNECTION_LOST, asyncpg.InternalClientError) as exc:
                log.warning(
                    "projection %s: Postgres unreachable (%r); starting over", self.name, exc
                )
                await asyncio.sleep(RECONNECT_DELAY)
            except Exception:
                log.exception("projection %s: following the log failed; starting over", self.name)
                await asyncio.sleep(self.settings.standby_poll)

    @contextlib.asynccontextmanager
    async def _leadership(self) -> AsyncIterator[asyncpg.Connection]:
        """Hold the projection's advisory lock (waiting for it) on a connection of our own."""
        while True:
            conn = await self.pool.acquire()
            try:
                if await conn.fetchval("SELECT pg_try_advisory_lock(hashtext($1))", self.lock_key):
                    break
            except BaseException:
                await self.pool.release(conn)
                raise
            await self.pool.release(conn)
            await asyncio.sleep(self.settings.standby_poll)
        log.info("projection %s: following the log", self.name)
        try:
            yield conn
        finally:
            with contextlib.suppress(Exception):
                await conn.execute("SELECT pg_advisory_unlock(hashtext($1))", self.lock_key)
            await self.pool.release(conn)

    async def _follow(self, lock_conn: asyncpg.Connection) -> bool:
        """Apply events as they arrive; returns True when NATS was reconnected (follow again
        while holding the lock), False when the lock's connection is gone.

        An ordered consumer lives only on the server: a restarted nats-server has lost it, and
        nats-py would notice only after two missed heartbeats (10-20 s). Following again from
        the checkpoint costs a new consumer; what arrives twice is skipped by the checkpoint.
        The lock's connection ends when Postgres crashes or restarts: it is noticed at once
        (the crash may have lost this projection's last commits: see CheckpointRegressed).
        """
        start = await self.pool.fetchval(
            "SELECT last_seq FROM projection_checkpoints WHERE projection = $1", self.name
        )
        self._at = start
        self._floor = start or 0
        # Events as they arrive; None wakes the loop because someone waits.
        arrived: asyncio.Queue[Msg | _Reconnected | _LockLost | None] = asyncio.Queue()

        def on_lock_lost(_conn: object) -> None:
            arrived.put_nowait(_LOCK_LOST)

        lock_conn.add_termination_listener(on_lock_lost)
        # The highest sequence a waiter (any process) asked this projection for.
        wanted = 0

        tap = self.tap

        async def on_msg(msg: Msg) -> None:
            arrived.put_nowait(msg)
            if tap is not None:
                tap.heard(msg)

        async def on_wanted(msg: Msg) -> None:
            nonlocal wanted
            with contextlib.suppress(ValueError):
                wanted = max(wanted, int(msg.data))
                arrived.put_nowait(None)

        sub = await self.eventlog.js.subscribe(
            self.projection.filter_subject,
            stream=subjects.EVENTS_STREAM,
            ordered_consumer=True,
            cb=on_msg,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=(start or 0) + 1
            ),
        )
        asks = await self.eventlog.nc.subscribe(
            subjects.projection_wanted_subject(self.name), cb=on_wanted
        )
        loop = asyncio.get_running_loop()
        reconnected = asyncio.ensure_future(self.eventlog.until_reconnected())
        reconnected.add_done_callback(lambda _: arrived.put_nowait(_RECONNECTED))
        # Events this projection does not handle only move its checkpoint. Most
        # events are some other projection's business, and every checkpoint
        # commit wakes every waiting process (NOTIFY), so that move is lazy: it
        # is folded into the next batch's transaction, or written after
        # the settings' skip_lag, or at once when a waiter asks for a sequence past the
        # checkpoint (ProjectionWatcher.wait publishes on projection_wanted).
        skipped: int | None = None
        skipped_since = 0.0
        committed = start or 0
        if tap is not None:
            tap.follow(True)
        if self.on_following is not None:
            self.on_following(self.name, True)
        try:
            while True:
                wait = IDLE_CHECK
                if skipped is not None:
                    wait = max(0.0, skipped_since + self.settings.skip_lag - loop.time())
                try:
                    # (wait_for costs a task: only when there is something to wait for)
                    first = (
                        arrived.get_nowait()
                        if not arrived.empty()
                        else await asyncio.wait_for(arrived.get(), wait)
                    )
                except TimeoutError:
                    if skipped is not None:
                        await self._advance(skipped)
                        committed, skipped = skipped, None
                        continue
                    # Raises if our session (and with it the lock) is gone.
                    await lock_conn.fetchval("SELECT 1")
                    continue
                if isinstance(first, _Reconnected):
                    log.info("projection %s: NATS reconnected; following again", self.name)
                    return True
                if isinstance(first, _LockLost):
                    log.warning(
                        "projection %s: lost its Postgres session; starting over", self.name
                    )
                    return False
                batch = [first] if first is not None else []
                while len(batch) < MAX_BATCH and not arrived.empty():
                    item = arrived.get_nowait()
                    if isinstance(item, _Reconnected | _LockLost):
                        arrived.put_nowait(item)  # after this batch
                        break
                    if item is not None:
                        batch.append(item)
                if batch:
                    events = [raw_event(m) for m in batch]
                    if any(self._concerns(e) for e in events):
                        await self.apply_batch(events)  # its claim covers what was skipped
                        committed, skipped = events[-1].seq, None
                        continue
                    if skipped is None:
                        skipped_since = loop.time()
                    skipped = events[-1].seq
                if skipped is not None and (
                    wanted > committed or loop.time() - skipped_since >= self.settings.skip_lag
                ):
                    await self._advance(skipped)
                    committed, skipped = skipped, None
                if wanted > committed and skipped is None and arrived.empty():
                    end, past = await self._past_own_events(committed)
                    if past and end > committed:
                        await self._advance(end)
                        committed = end
                    # (A position past the log's end is no one's: not asked about again.)
                    wanted = min(wanted, end)
        finally:
            if tap is not None:
                tap.follow(False)
            if self.on_following is not None:
                self.on_following(self.name, False)
            reconnected.cancel()
            with contextlib.suppress(Exception):
                lock_conn.remove_termination_listener(on_lock_lost)
            for subscription in (sub, asks):
                with contextlib.suppress(Exception):
                    await subscription.unsubscribe()

    async def _past_own_events(self, given: int) -> tuple[int, bool]:
        """The log's end, and whether none of this projection's events lies past `given`
        (the last position it was given and has applied) up to there.

        A waiter may ask for a position past every event this projection follows: an
        event on a subject outside its filter (the agents projection follows agents' own
        subjects, a conversation's run appends under them). No delivery would ever take
        the projection there, and the waiter would wait until some later event of the
        projection's own came, or for its whole timeout. The log says whether there is
        none in between: the end is read first, then the last event matching the filter,
        so every event of ours up to that end has been given when that last one has.
        """
        try:
            end = await self.eventlog.end()
            last_own = await self.eventlog.last_seq_matching(self.projection.filter_subject)
        except Exception as exc:
            if not is_outage(exc):
                raise
            # (NATS away: the waiter asks again, every second, until it answers.)
            log.info("projection %s: the log's end not known (%r)", self.name, exc)
            return given, False
        # (One past `given` is on its way: its delivery moves the projection on.)
        return end, last_own <= given

    # -- applying events ----------------------------------------------------

    async def apply(self, seq: int, subject: str, data: bytes) -> Outcome:
        """Apply one event (exactly once: a second call with it is SKIPPED)."""
        outcomes = await self._apply_once([RawEvent(seq, subject, data)])
        return outcomes[0]

    async def apply_batch(self, events: Sequence[RawEvent]) -> None:
        """Apply events (in stream order) in one transaction; if that fails, one by one."""
        if len(events) > 1:
            try:
                await self._apply_once(events)
                return
            except Exception as exc:
                if not its_fault(exc) and not isinstance(exc, PASSING):
                    raise  # the follower starts over from its checkpoint
                log.warning(
                    "projection %s: a batch failed; applying its events one by one",
                    self.name,
                    exc_info=True,
                )
        for event in events:
            await self._apply_alone(event)

    async def _apply_alone(self, event: RawEvent) -> None:
        """Apply one event; dead-letter it if it cannot be (see MAX_ATTEMPTS)."""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                await self._apply_once([event])
                return
            except PASSING as exc:
                if attempt == MAX_ATTEMPTS:
                    log.exception("projection %s: seq %d failed for good", self.name, event.seq)
                    await self._give_up(event, f"handler failed {MAX_ATTEMPTS} times: {exc!r}")
                    return
                log.warning(
                    "projection %s: seq %d failed (%r); will retry", self.name, event.seq, exc
                )
                await asyncio.sleep(min(self.settings.retry_delay * 2 ** (attempt - 1), 30.0))
            except Exception as exc:
                if not its_fault(exc):
                    raise  # the follower starts over from its checkpoint
                log.exception("projection %s: seq %d cannot be applied", self.name, event.seq)
                await self._give_up(event, f"handler failed: {exc!r}")
                return

    def _concerns(self, event: RawEvent) -> bool:
        """Handled here, or malformed (then every projection dead-letters it)."""
        kind = known_type(event.data)
        return kind is None or kind in self.projection.handlers

    async def _apply_once(self, events: Sequence[RawEvent]) -> list[Outcome]:
        end = events[-1].seq
        if not any(self._concerns(e) for e in events):
            # Nothing to change but the checkpoint: one statement, no transaction
            # (most events are some other projection's business).
            if await self._advance(end):
                return [Outcome.APPLIED for _ in events]
            return [Outcome.SKIPPED for _ in events]
        async with self.pool.acquire() as conn:
            expected, self._at = self._at, None
            if expected is not None:
                outcomes = await self._apply_from(conn, events, expected)
                if outcomes is not None:
                    self._at = end
                    self._committed(end)
                    return outcomes
            async with conn.transaction():
                await conn.execute(_ASYNC_COMMIT)
                at = await conn.fetchval(_CLAIM, self.name, end, notify_channel(self.name))
                if at < self._floor:
                    raise CheckpointRegressed(
                        f"the checkpoint is at {at}, behind {self._floor} where it was left"
                    )
                outcomes = await self._apply_after(conn, events, at, live=True)
            self._at = max(at, end)
            self._committed(self._at)
            return outcomes

    async def _advance(self, seq: int) -> bool:
        """Move the checkpoint to `seq` (only forward); False if it was there already.

        Never from below where this follower left it (CheckpointRegressed).
        """
        async with self.pool.acquire() as conn:
            advanced = await conn.fetchrow(
                _ADVANCE, self.name, seq, notify_channel(self.name), self._floor
            )
            at = None
            if advanced is None:
                at = await conn.fetchval(
                    "SELECT last_seq FROM projection_checkpoints WHERE projection = $1", self.name
                )
                if at is not None and at < self._floor:
                    raise CheckpointRegressed(
                        f"the checkpoint is at {at}, behind {self._floor} where it was left"
                    )
        self._at = seq if advanced is not None else None
        if advanced is not None:
            self._committed(seq)
        elif at is not None and at >= seq:
            # Moved past it by someone else (a rebuild): this process's waiters, who hear
            # of this projection from us while we follow, are told.
            self._committed(at)
        return advanced is not None

    def _committed(self, seq: int) -> None:
        self._floor = max(self._floor, seq)
        if self.on_committed is not None:
            self.on_committed(self.name, seq)

    async def _apply_from(
        self, conn: asyncpg.Connection, events: Sequence[RawEvent], expected: int
    ) -> list[Outcome] | None:
        """Apply the events past checkpoint `expected`, where this follower left it, usually
        in one round trip (deferred_writes.py): BEGIN, the claim to the batch's end, the
        handlers' statements and COMMIT go as one message. None if someone moved the
        checkpoint meanwhile (another follower, a rebuild): nothing was applied.
        """
        end = events[-1].seq
        writes = DeferredWrites(
            conn,
            f"BEGIN; {_ASYNC_COMMIT}; SELECT o_claim_checkpoint({_literal(self.name)},"
            f" {int(expected)}, {int(end)}, {_literal(notify_channel(self.name))})",
        )
        try:
            # (The handlers get asyncpg's calls they use: deferred_writes.py.)
            handlers_conn = cast(asyncpg.Connection, writes)
            outcomes = await self._apply_after(handlers_conn, events, expected, live=True)
            await writes.commit()
        except ClaimLost:
            await conn.execute("ROLLBACK")
            return None
        except BaseException:
            if writes.begun:
                with contextlib.suppress(Exception):
                    await conn.execute("ROLLBACK")
            raise
        return outcomes

    async def _apply_in(
        self, conn: asyncpg.Connection, events: Sequence[RawEvent], *, live: bool
    ) -> list[Outcome]:
        # The row lock taken here serialises us with another follower and with
        # a rebuild in progress.
        at = await conn.fetchval(_CLAIM, self.name, events[-1].seq, notify_channel(self.name))
        return await self._apply_after(conn, events, at, live=live)

    async def _apply_after(
        self, conn: asyncpg.Connection, events: Sequence[RawEvent], at: int, *, live: bool
    ) -> list[Outcome]:
        """Apply the events past checkpoint `at` (the caller has claimed the checkpoint)."""
        outcomes = []
        handled = 0
        for event in events:
            if event.seq <= at:
                outcomes.append(Outcome.SKIPPED)
                continue
            if not self._concerns(event):
                outcomes.append(Outcome.APPLIED)
                continue
            try:
                envelope: Envelope[Message] = decode(event.data)
            except MalformedMessage as exc:
                if live:
                    await dead_letter(
                        self.eventlog.js,
                        f"projection-{self.name}",
                        event.data,
                        str(exc),
                        origin_subject=event.subject,
                        origin_seq=event.seq,
                    )
                outcomes.append(Outcome.DEAD_LETTERED)
                continue
            handler = self.projection.handlers[envelope.type]
            with continued(f"project {self.name}", event.headers, seq=event.seq):
                await handler(conn, Recorded(event.seq, event.subject, envelope))
            outcomes.append(Outcome.APPLIED)
            handled += 1
        if live and handled:
            # (Counted before the commit: a batch that then fails is applied again and
            # counted again; the counter says how much work the projection did.)
            measured.projection_events.add(handled, self._attributes)
        return outcomes

    async def _give_up(self, event: RawEvent, reason: str) -> None:
        await dead_letter(
            self.eventlog.js,
            f"projection-{self.name}",
            event.data,
            reason,
            origin_subject=event.subject,
            origin_seq=event.seq,
        )
        async with self.pool.acquire() as conn:
            await conn.fetchrow(_ADVANCE, self.name, event.seq, notify_channel(self.name), 0)
        self._at = None

    async def rebuild(self) -> Rebuilt:
        """Drop the projection's rows and replay the log into it, in one transaction.

        Readers keep seeing the old rows until the commit (DELETE, not
        TRUNCATE, so they are not blocked); the live projector waits on the
        checkpoint row lock and afterwards skips what the rebuild applied.
        An event that cannot be applied (dead-lettered when it was live) is
        skipped, as the live projector skipped it, and counted.
        """
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.fetchval(_LOCK_CHECKPOINT, self.name)
            for table in self.projection.tables:
                await conn.execute(f"DELETE FROM {table}")
            await conn.execute(
                "UPDATE projection_checkpoints SET last_seq = 0 WHERE projection = $1",
                self.name,
            )
            return await self.replay_into(conn)

    async def replay_into(self, conn: asyncpg.Connection, until: int | None = None) -> Rebuilt:
        """Apply the log's events (up to sequence `until`, else to its end) to the tables
        `conn` sees, in its transaction: a rebuild's, or a scratch schema's first on its
        search_path (o_ops/verify.py compares such a replay with the live rows)."""
        count = 0
        skipped: list[int] = []
        batch: list[RawEvent] = []
        # (closed at once when `until` is passed: its consumer goes then, not at the end)
        replay = self.eventlog.replay(self.projection.filter_subject)
        async with contextlib.aclosing(replay) as events:
            async for raw in events:
                if until is not None and raw.seq > until:
                    break
                batch.append(raw)
                count += 1
                if len(batch) == MAX_BATCH:
                    skipped += await self._replay_batch(conn, batch)
                    batch = []
        if batch:
            skipped += await self._replay_batch(conn, batch)
        return Rebuilt(count, skipped)

    async def _replay_batch(self, conn: asyncpg.Connection, batch: list[RawEvent]) -> list[int]:
        """Apply a rebuild's batch (a savepoint each); the sequences of events skipped.

        The handlers' writes go as few messages as their reads allow (deferred_writes.py:
        usually one for the whole batch), not a round trip each: a rebuild is a long
        sequence of them. Should the batch fail, its events are applied one by one the
        ordinary way, which finds the one to skip.
        """
        try:
            async with conn.transaction():
                at = await conn.fetchval(
                    _CLAIM, self.name, batch[-1].seq, notify_channel(self.name)
                )
                writes = DeferredWrites(conn)
                await self._apply_after(cast(asyncpg.Connection, writes), batch, at, live=False)
                await writes.flush()
            return []
        except Exception:
            pass
        skipped = []
        for event in batch:
            try:
                async with conn.transaction():
                    await self._apply_in(conn, [event], live=False)
            except Exception as exc:
                log.warning("rebuild of %s: seq %d skipped: %r", self.name, event.seq, exc)
                skipped.append(event.seq)
                # The checkpoint still moves past it.
                async with conn.transaction():
                    await conn.fetchval(_CLAIM, self.name, event.seq, notify_channel(self.name))
        return skipped
