"""A projection's transaction in as few round trips as its handlers allow: usually one.

A projector that knows where it left its checkpoint applies a batch as: claim the checkpoint
(from where it left it to the batch's end), the handlers' statements, commit. Sent one by
one that is three round trips or more for a batch of one event, and a run's events each make
such a batch on the path of its reply (bench/README.md: with TLS to Postgres every round trip
costs CPU at both ends). Here the handlers' `execute` calls are kept and sent with the claim
and the commit as one simple-query message: `BEGIN; ...claim...; stmt; stmt; COMMIT`, each
statement's parameters written into its text (sql_literals.py).

A handler that reads (`fetch`, `fetchrow`, `fetchval`), or a statement whose parameters
cannot be written as literals, sends what is kept first, then goes the ordinary way; the
transaction is the same, only the number of messages differs. Postgres runs the statements
of one message in order and stops at the first error, so a failing statement fails the
transaction as it did before, only at the flush rather than at the call (no handler looks at
an `execute`'s status or catches its error: the projections' tests would say otherwise).

The claim raises when the checkpoint is no longer where the projector left it (another
follower or a rebuild moved it: migration 0075's `o_claim_checkpoint`), so nothing after it
in the message runs: `ClaimLost`, and the projector rolls back and claims the slow way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg
from asyncpg.types import Type

from o_runtime.sql_literals import NotInlinable, inline

# Parameter types by statement text (the types Postgres inferred: they change only with
# the schema, which changes only across a restart of the services). Bounded: handlers
# that build their statements (PATCH-like events) make a text per set of columns.
_TYPES: dict[str, tuple[Type, ...]] = {}
MAX_TYPES = 2048

# Raised by o_claim_checkpoint (migration 0075) when the checkpoint moved.
CLAIM_LOST_TABLE = "projection_checkpoints"


class ClaimLost(Exception):
    """The checkpoint was not where this follower left it: nothing was applied."""


def claim_lost(exc: BaseException) -> bool:
    return (
        isinstance(exc, asyncpg.RaiseError) and getattr(exc, "table_name", None) == CLAIM_LOST_TABLE
    )


class DeferredWrites:
    """The connection a batch's handlers see: asyncpg's read and write calls, the writes
    kept until a read needs them sent, or the transaction ends.

    `opening` is what begins the transaction (BEGIN, its settings and the claim): it goes
    with the first message. None: the transaction is already open (a rebuild's batch,
    o_runtime/projector.py).
    """

    def __init__(self, conn: asyncpg.Connection, opening: str | None = None) -> None:
        self.conn = conn
        self._kept: list[str] = [opening] if opening is not None else []
        # Messages sent so far (one when the whole transaction went as one).
        self.messages = 0
        # Literals are written for standard_conforming_strings (Postgres' default since 9.1,
        # reported to the client with every change): otherwise every statement goes alone.
        self._literals = conn.get_settings().standard_conforming_strings == "on"

    @property
    def begun(self) -> bool:
        """Whether the transaction was opened on the server (a ROLLBACK is needed on failure)."""
        return self.messages > 0

    async def execute(self, sql: str, *args: object, timeout: float | None = None) -> str:
        """Kept for the next message (its status is not known yet: "")."""
        try:
            if not self._literals:
                raise NotInlinable("standard_conforming_strings is off")
            self._kept.append(inline(sql, await self._types(sql) if args else (), args))
        except NotInlinable:
            await self.flush()
            status: str = await self.conn.execute(sql, *args, timeout=timeout)
            return status
        return ""

    async def executemany(self, sql: str, args: Sequence[Sequence[Any]], **kw: Any) -> None:
        await self.flush()
        await self.conn.executemany(sql, args, **kw)

    async def fetch(self, sql: str, *args: object, **kw: Any) -> list[asyncpg.Record]:
        await self.flush()
        rows: list[asyncpg.Record] = await self.conn.fetch(sql, *args, **kw)
        return rows

    async def fetchrow(self, sql: str, *args: object, **kw: Any) -> asyncpg.Record | None:
        await self.flush()
        row: asyncpg.Record | None = await self.conn.fetchrow(sql, *args, **kw)
        return row

    async def fetchval(self, sql: str, *args: object, **kw: Any) -> Any:
        await self.flush()
        return await self.conn.fetchval(sql, *args, **kw)

    async def flush(self) -> None:
        """Send what is kept (the transaction stays open)."""
        if self._kept:
            await self._send(self._kept)

    async def commit(self) -> None:
        """Send what is kept and COMMIT, in one message."""
        await self._send([*self._kept, "COMMIT"])

    async def _send(self, statements: list[str]) -> None:
        self._kept = []
        self.messages += 1
        try:
            await self.conn.execute(";\n".join(statements))
        except asyncpg.PostgresError as exc:
            if claim_lost(exc):
                raise ClaimLost(str(exc)) from exc
            raise

    async def _types(self, sql: str) -> tuple[Type, ...]:
        types = _TYPES.get(sql)
        if types is None:
            # (A Parse and Describe: it neither runs the statement nor touches the
            # transaction, so the writes kept so far can wait.)
            statement = await self.conn.prepare(sql)
            types = tuple(statement.get_parameters())
            if len(_TYPES) >= MAX_TYPES:
                _TYPES.clear()
            _TYPES[sql] = types
        return types
