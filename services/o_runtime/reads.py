"""Reads a decision may rely on: projections as of a log position they are known to have reached.

A decision made on a projection (the memory service's next block version, the
gateway's change to an agent, the executor's "is this run finished?") is only
as good as the rows it read. The watcher (waiting.py) knows what projections
have applied as far as this process was told; after Postgres loses its last
asynchronous commits in a crash, what it was told no longer holds. A decision
that trusted it read a block as it was before an acknowledged edit and
appended a version built on that stale value, with the expected subject
sequence of the log's head, so the log accepted it: the acknowledged edit was
overwritten (issue 10).

So a decision checks the projection's checkpoint row on the same connection
as the rows it decides on. A checkpoint and the changes it covers are
committed together and lost together, and a crash after the check cuts this
connection, so every read that succeeds on it sees the projection at the
checked position or later. When the check fails, the watcher is corrected and
the decision waits for the projection to apply those events again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg

from o_runtime.waiting import ProjectionWatcher

_CHECKPOINTS = (
    "SELECT projection, last_seq FROM projection_checkpoints WHERE projection = ANY($1::text[])"
)


def _with_checkpoint(sql: str, placeholder: int) -> str:
    """`sql`'s first row (or NULLs) beside the projection's checkpoint, in one statement."""
    return (
        f"SELECT (SELECT last_seq FROM projection_checkpoints WHERE projection = ${placeholder})"
        f" AS o_checkpoint, q.* FROM (SELECT 1) AS o_one LEFT JOIN ({sql}) AS q ON true"
    )


class ProjectionReads:
    def __init__(self, pool: asyncpg.Pool, watcher: ProjectionWatcher) -> None:
        self.pool = pool
        self.watcher = watcher

    @contextlib.asynccontextmanager
    async def at(
        self, seq: int, *projections: str, timeout: float = 10.0
    ) -> AsyncIterator[asyncpg.Connection]:
        """A connection on which every named projection shows log position `seq` or later.

        Raises ProjectionLag (waiting.py) if they do not get there within `timeout`.
        """
        names = list(projections)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            # The watcher's word first (usually true, and it waits without polling).
            await self.watcher.wait(seq, *projections, timeout=max(0.0, deadline - loop.time()))
            async with self.pool.acquire() as conn:
                rows = await conn.fetch(_CHECKPOINTS, names)
                reached = {r["projection"]: r["last_seq"] for r in rows}
                behind = [p for p in projections if reached.get(p, 0) < seq]
                if not behind:
                    yield conn
                    return
            # What the watcher was told was lost with Postgres' last commits: it
            # waits for the projection to apply those events again.
            for p in behind:
                self.watcher.correct(p, reached.get(p, 0))

    @contextlib.asynccontextmanager
    async def row_at(
        self, seq: int, projection: str, sql: str, *args: object, timeout: float = 10.0
    ) -> AsyncIterator[tuple[asyncpg.Connection, asyncpg.Record | None]]:
        """As `at`, with the first row of `sql` read in the same round trip as the check.

        A decision usually starts with one row (the block, the run); its check of the
        checkpoint rides along instead of costing a round trip of its own. The row is
        None if `sql` found none; further reads go on the connection.
        """
        checked = _with_checkpoint(sql, len(args) + 1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            await self.watcher.wait(seq, projection, timeout=max(0.0, deadline - loop.time()))
            async with self.pool.acquire() as conn:
                found = await conn.fetchrow(checked, *args, projection)
                assert found is not None  # (the LEFT JOIN always gives one row)
                reached = found["o_checkpoint"] or 0
                if reached >= seq:
                    row = None if all(v is None for v in list(found.values())[1:]) else found
                    yield conn, row
                    return
            self.watcher.correct(projection, reached)
