"""The read fence: which projection commits this process has heard of, exactly, as of now.

A cached read (hot_reads.py) may be served only if no projection has committed since it
was rendered. Projectors `pg_notify` in their transaction (o_runtime/projector.py), so
this process LISTENs on a connection of its own and counts every notification: the
`generation`. A notification can still be on its way when a request arrives, though: one
gateway replica acknowledges a write once *its* listener heard of it, and the client's
next read may reach another replica (or this one, through a projector that told it
in-process, before its NOTIFY came back). So a request asks for a fence: a round trip on
the LISTEN connection sent after the request arrived. Postgres signals every listener when
a transaction commits, before the committer is told it committed, and a backend sends the
notifications it was signalled about before the ReadyForQuery that ends a query
(postgres.c); asyncpg hands them to this process in the order they came. Once the fence's
query returns, every commit that finished before the request arrived has moved the
generation.

One round trip serves every request that arrived before it was sent: requests arriving
while it is on its way wait for the next one (so each waits one or two round trips, and
a thousand concurrent reads cost Postgres a handful of empty queries).

While the connection is down nothing is known: `fence()` says None (no cache) until it
is back and listening, and the generation moves on reconnection. asyncpg does not always
announce a closed connection (one it aborts itself closes without its termination
listeners), and until a round trip fails the fence would go on telling the watcher of
commits that no longer come: so it looks every CHECK_EVERY whether the connection is still
open (no I/O: asyncpg's own flag).

The same notifications wake the process's waiters (`watcher`: o_runtime/waiting.py), so
the gateway's Postgres tells it of each commit once, not once on this connection and
again on the watcher's: while this connection listens, the watcher does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg

from o_contracts import projection_names
from o_runtime.pg_reconnect import keep_connecting
from o_runtime.projector import notify_channel
from o_runtime.waiting import ProjectionWatcher

log = logging.getLogger(__name__)

# A round trip this slow means the connection is in trouble: it is dropped (and made
# again), and the reads waiting on it are rendered instead of sent from what was kept.
ROUND_TRIP_TIMEOUT = 5.0
# Its connection's name in pg_stat_activity.
APPLICATION_NAME = "o-gateway-read-fence"
# How often it looks whether its connection was closed unannounced (seconds).
CHECK_EVERY = 1.0


class ReadFence:
    def __init__(self, dsn: str, watcher: ProjectionWatcher | None = None) -> None:
        self.dsn = dsn
        # Told of each commit heard here, while this connection listens.
        self.watcher = watcher
        # How many projection commits (and connection changes) this process has heard of.
        self.generation = 0
        self._conn: asyncpg.Connection | None = None
        # The fence the next round trip answers (requests that arrived since the last one
        # was sent), and the task sending round trips while anyone waits.
        self._next: asyncio.Future[int | None] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._reconnecting: asyncio.Task[None] | None = None
        self._checking: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        await self._connect()
        self._checking = asyncio.create_task(self._check_open_every(CHECK_EVERY))

    async def stop(self) -> None:
        self._stopping = True
        self._telling(False)
        for task in (self._reconnecting, self._sender, self._checking):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    @property
    def connected(self) -> bool:
        return self._conn is not None

    async def fence(self) -> int | None:
        """The generation once every commit finished before this call has been heard of;
        None while the LISTEN connection is down (then nothing cached may be served)."""
        if self._conn is None:
            return None
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            if self._sender is None or self._sender.done():
                self._sender = asyncio.create_task(self._send_fences())
        return await asyncio.shield(self._next)

    async def _send_fences(self) -> None:
        while self._next is not None:
            waiting, self._next = self._next, None
            generation = None
            try:
                # Sent after every waiter of `waiting` arrived (they joined it before this).
                generation = await self._round_trip()
            finally:
                # (None if the round trip failed or was cancelled: no cached answer.)
                if not waiting.done():
                    waiting.set_result(generation)

    async def _round_trip(self) -> int | None:
        conn = self._conn
        if conn is None:
            return None
        try:
            # The smallest query (no table, no column): Postgres sends the notifications
            # it holds before its reply.
            await conn.execute("SELECT", timeout=ROUND_TRIP_TIMEOUT)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("read fence: round trip failed (%r); no kept answers until back", exc)
            self._lost(conn)
            conn.terminate()
            return None
        # (The notifications that came before the reply were handed over by call_soon,
        # ahead of this task's wake-up: they have been counted.)
        return self.generation if self._conn is conn else None

    async def _connect(self) -> None:
        conn = await asyncpg.connect(
            self.dsn, server_settings={"application_name": APPLICATION_NAME}
        )
        # Every projection's commits (each has a channel of its own: projector.py).
        for projection in projection_names.ALL:
            await conn.add_listener(notify_channel(projection), self._on_notify)
        conn.add_termination_listener(self._lost)
        self.generation += 1
        self._conn = conn
        self._telling(True)

    def _telling(self, telling: bool) -> None:
        if self.watcher is not None:
            for projection in projection_names.ALL:
                self.watcher.told(projection, APPLICATION_NAME, telling)

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self.generation += 1
        if self.watcher is not None:
            # (what projectors say: "<projection>:<sequence>")
            projection, _, seq = payload.rpartition(":")
            if projection and seq.isdigit():
                self.watcher.applied(projection, int(seq))

    async def _check_open_every(self, period: float) -> None:
        while not self._stopping:
            await asyncio.sleep(period)  # (a periodic look, not a wait for anything)
            conn = self._conn
            if conn is not None and conn.is_closed():
                self._lost(conn)

    def _lost(self, conn: object) -> None:
        if self._stopping or conn is not self._conn:
            return
        log.warning("read fence: Postgres connection lost; reconnecting")
        self._conn = None
        self.generation += 1
        self._telling(False)
        if self._reconnecting is None or self._reconnecting.done():
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        await keep_connecting(self._connect, lambda: self._stopping)
