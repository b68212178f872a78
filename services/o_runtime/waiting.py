"""Read-your-writes: wait until a projection has applied a given stream sequence.

Projectors `pg_notify` each applied sequence in their transaction, so a
waiter wakes on commit; one LISTEN connection per process serves all waiters.
A waiter that has to wait also says so over NATS: a projector moves its
checkpoint past events it does not handle lazily, unless someone waits.

Each projection notifies on a channel of its own (projector.notify_channel), and a
process LISTENs only to the projections it has waited for, and not to one its own
projector follows (that projector tells it of each commit in-process): every process
listening to every commit was a message and a wake-up per process per commit, each a
TLS record where Postgres has TLS, for commits almost none of them waited for.

If the LISTEN connection is lost (Postgres restarted, or crashed and lost the
last asynchronous projection commits), what it was told may no longer hold:
the watcher forgets it, reconnects and reads the checkpoints again. asyncpg does not always
say so (a connection it aborts itself closes without calling its termination listeners), so
a connection found closed when it is used is lost the same way, and a wait that lasts reads
the checkpoints every ASK_AGAIN: a notification lost on the way costs a second, not the
wait's whole timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable

import asyncpg
from nats.aio.client import Client as NATS

from o_contracts import subjects
from o_runtime.pg_reconnect import keep_connecting
from o_runtime.projector import notify_channel

log = logging.getLogger(__name__)

# How long a waiter for an event the projection applies itself waits before it asks for it
# anyway (wait(applies=True)): a commit usually comes within a few milliseconds, and each
# ask is a message to the projector, over TLS where NATS has it.
ASK_AFTER = 0.05
ASK_AGAIN = 1.0


class ProjectionLag(TimeoutError):
    def __init__(self, projection: str, seq: int, reached: int) -> None:
        super().__init__(
            f"projection '{projection}' has not applied event {seq} yet (at {reached})"
        )


class ProjectionWatcher:
    def __init__(self, dsn: str, nc: NATS | None = None) -> None:
        self.dsn = dsn
        # Where to say that we wait (None: nowhere; lazy checkpoints then lag
        # up to the projector's SKIP_LAG).
        self.nc = nc
        self._conn: asyncpg.Connection | None = None
        self._reached: dict[str, int] = defaultdict(int)
        self._changed = asyncio.Condition()
        self._stopping = False
        self._reconnecting: asyncio.Task[None] | None = None
        # The projections waited for here (kept: a process waits for the same few again);
        # who else in this process tells of each commit of a projection (its projector
        # while it follows, a connection of its own that listens: `told`); the projections
        # whose channels this connection LISTENs to: those waited for that nobody tells of.
        self._waited: set[str] = set()
        self._tellers: dict[str, set[str]] = defaultdict(set)
        self._listening: set[str] = set()
        # One query at a time on the connection (LISTEN, UNLISTEN, reading checkpoints).
        self._querying = asyncio.Lock()
        # When the checkpoints were last read (the loop's clock): waiters that all wait
        # long read them once between them, not once each (`refresh(fresh_within=...)`).
        self._read_at = float("-inf")
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self._connect()

    async def _connect(self) -> None:
        conn = await asyncpg.connect(self.dsn)
        listening = set()
        for projection in sorted(self._untold()):
            await conn.add_listener(notify_channel(projection), self._on_notify)
            listening.add(projection)
        conn.add_termination_listener(self._on_lost)
        self._conn, self._listening = conn, listening
        # Listen first, then read: no notification can fall between the two. (A failure
        # here is the connect's: keep_connecting tries again.)
        await self._read_checkpoints(conn)

    @property
    def listening(self) -> frozenset[str]:
        """The projections whose commits Postgres tells this process of."""
        return frozenset(self._listening)

    def following(self, projection: str, follows: bool) -> None:
        """A projector of this process started (True) or stopped (False) following
        `projection`. While it follows it tells of each commit (`applied`); once it stops,
        the commits are another process's."""
        self.told(projection, "projector", follows)

    def told(self, projection: str, teller: str, telling: bool) -> None:
        """Whether `teller` in this process tells (`applied`) of every commit of
        `projection` from now on: while one does, this connection need not LISTEN to it;
        once none does, it LISTENs (and reads the checkpoints) before anyone waits long."""
        tellers = self._tellers[projection]
        before = bool(tellers)
        if telling:
            tellers.add(teller)
        else:
            tellers.discard(teller)
        if bool(tellers) != before and not self._stopping and projection in self._waited:
            task = asyncio.get_running_loop().create_task(self._listen_as_needed())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _untold(self) -> set[str]:
        """The projections waited for that nobody in this process tells of."""
        return {p for p in self._waited if not self._tellers[p]}

    def _needs_listening(self) -> bool:
        return self._listening != self._untold()

    async def _listen_as_needed(self) -> None:
        """LISTEN to the channels of the projections waited for and not followed here
        (UNLISTEN the others), then read the checkpoints: a commit made before a LISTEN
        is read, every one after it is heard."""
        conn = self._conn
        if conn is None:
            return  # reconnecting: it listens, then reads the checkpoints
        added = False
        try:
            async with self._querying:
                if self._conn is None or self._conn is not conn:
                    return  # lost meanwhile: the new connection listens as wanted
                conn = self._conn
                wanted = self._untold()
                for projection in sorted(wanted - self._listening):
                    await conn.add_listener(notify_channel(projection), self._on_notify)
                    self._listening.add(projection)
                    added = True
                for projection in sorted(self._listening - wanted):
                    await conn.remove_listener(notify_channel(projection), self._on_notify)
                    self._listening.discard(projection)
            if added:
                await self.refresh()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            # Its loss reconnects, listens to every channel wanted and reads them again.
            log.warning("projection watcher: LISTEN on Postgres failed (%r)", exc)
            self._check_open()

    async def stop(self) -> None:
        self._stopping = True
        for task in [self._reconnecting, *self._tasks]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    def _on_lost(self, conn: object) -> None:
        # (the termination listener: the connection's session ended)
        self._lost(conn)

    def _check_open(self) -> None:
        """A connection asyncpg closed without telling (see the module's docstring) is lost
        like one whose session ended."""
        conn = self._conn
        if conn is not None and conn.is_closed():
            self._lost(conn)

    def _lost(self, conn: object) -> None:
        if self._stopping or conn is None or conn is not self._conn:
            return  # stopping, or a connection already replaced
        log.warning("projection watcher: Postgres connection lost; reconnecting")
        self._conn = None
        self._listening = set()
        self._reached.clear()
        if self._reconnecting is None or self._reconnecting.done():
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        await keep_connecting(self._connect, lambda: self._stopping)

    async def refresh(self, fresh_within: float = 0.0) -> None:
        """Read every projection's checkpoint, unless they were read less than
        `fresh_within` seconds ago. On a connection found lost, nothing is read here: the
        watcher connects again and reads them then."""
        conn = self._conn
        if conn is None:
            return  # reconnecting: it reads the checkpoints once connected
        try:
            await self._read_checkpoints(conn, fresh_within)
        except (OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError):
            if not conn.is_closed():
                raise
            self._lost(conn)

    async def _read_checkpoints(self, conn: asyncpg.Connection, fresh_within: float = 0.0) -> None:
        loop = asyncio.get_running_loop()
        async with self._querying:
            replaced = conn is not self._conn
            if replaced:
                return  # replaced while waiting for the lock: the new one reads them
            if loop.time() - self._read_at < fresh_within:
                return  # read meanwhile, for another waiter
            rows = await conn.fetch("SELECT projection, last_seq FROM projection_checkpoints")
            self._read_at = loop.time()
        async with self._changed:
            for row in rows:
                self._reached[row["projection"]] = max(
                    self._reached[row["projection"]], row["last_seq"]
                )
            self._changed.notify_all()

    def reached(self, projection: str) -> int:
        return self._reached[projection]

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        name, _, seq = payload.rpartition(":")
        self.applied(name, int(seq))

    def applied(self, projection: str, seq: int) -> None:
        """`projection` has committed `seq`: a NOTIFY said so, or a projector in this process
        (which need not wait for its own notification to travel through Postgres)."""
        if seq > self._reached[projection]:
            self._reached[projection] = seq
            asyncio.get_running_loop().create_task(self._wake())

    def correct(self, projection: str, seq: int) -> None:
        """`projection` stands at `seq`, read from its checkpoint row, below what we were told.

        After Postgres lost its last asynchronous commits (reads.py): waiters
        wait until the projection has applied those events again.
        """
        if seq < self._reached[projection]:
            log.warning(
                "projection %s is at %d, not %d as this process was told; waiting for it again",
                projection,
                seq,
                self._reached[projection],
            )
            self._reached[projection] = seq

    async def _wake(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait(
        self, seq: int, *projections: str, timeout: float = 10.0, applies: bool = False
    ) -> None:
        """Return once every named projection has applied `seq`; raise ProjectionLag.

        `applies`: the event at `seq` is one these projections apply (a run's end, for the
        runs projection), so each commits it without being asked: the waiter asks (on
        NATS, a message to the projector) only if that takes longer than ASK_AFTER. Else
        it asks at once: a projection moves past events it does not handle lazily.
        """

        def done() -> bool:
            return all(self._reached[p] >= seq for p in projections)

        if done():
            return
        self._check_open()
        self._waited.update(projections)
        if self._needs_listening():
            await self._listen_as_needed()
            if done():
                return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if applies and await self._until(done, min(ASK_AFTER, timeout)):
            return
        # Asked again every ASK_AGAIN: an ask is lost when no projector hears it (one
        # starting, or taking over from a replica that died). And the checkpoints are read
        # again: a notification is lost with the connection that was to bring it.
        while True:
            if self.nc is not None:
                for p in projections:
                    if self._reached[p] < seq:
                        await self.nc.publish(subjects.projection_wanted_subject(p), b"%d" % seq)
            remaining = deadline - loop.time()
            if await self._until(done, max(0.0, min(ASK_AGAIN, remaining))):
                return
            await self.refresh(fresh_within=ASK_AGAIN / 2)
            if done():
                return
            if remaining <= ASK_AGAIN:
                break
        lagging = next(p for p in projections if self._reached[p] < seq)
        raise ProjectionLag(lagging, seq, self._reached[lagging])

    async def _until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Whether `done()` came true within `timeout`."""
        try:
            async with asyncio.timeout(timeout):
                async with self._changed:
                    await self._changed.wait_for(done)
        except TimeoutError:
            return False
        return True
