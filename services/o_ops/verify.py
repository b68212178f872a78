"""`python -m o_ops projections verify [NAME ...]`: rebuild each projection into a scratch
schema and compare it with the live tables; exit 1 on any difference.

For each projection, in one REPEATABLE READ transaction on its own connection:

1. read the live checkpoint: the log position the live tables stand at (in the
   transaction's snapshot, so the live rows compared are exactly those);
2. make a scratch schema with empty copies of the projection's tables
   (`CREATE TABLE ... (LIKE live INCLUDING ALL)`: columns, defaults, indexes, checks) and
   of the checkpoint table, first on the `search_path`, so the projection's own handlers
   write there while what they read of other projections is the live rows, as in a rebuild;
3. replay the log into it up to the live checkpoint (o_runtime/projector.py,
   `replay_into`): a projection that lags is compared where it stands, never flagged for
   events it has not reached;
4. compare every table whole-row (`to_jsonb`), both ways, and pair the differences by
   primary key (row_diff.py);
5. roll back: the scratch schema never existed for anyone else, and the checkpoint
   notifications the replay raised are never delivered (NOTIFY is sent on commit only).

The live projection is not locked or paused; a verify costs what a rebuild costs.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from o_ops.row_diff import RowDifference, differences
from o_runtime.eventlog import EventLog
from o_runtime.projector import Projection, Projector


@dataclass(frozen=True)
class TableDifferences:
    table: str
    rows: list[RowDifference]


@dataclass(frozen=True)
class Verified:
    projection: str
    # The live checkpoint the comparison was made at.
    position: int
    replayed: int
    # Events the replay could not apply (dead-lettered when they were live).
    skipped: list[int]
    tables: list[TableDifferences] = field(default_factory=list)

    @property
    def differences(self) -> int:
        return sum(len(t.rows) for t in self.tables)

    def body(self) -> dict[str, Any]:
        return {
            "projection": self.projection,
            "position": self.position,
            "replayed": self.replayed,
            "skipped": self.skipped,
            "differences": {t.table: [r.body() for r in t.rows] for t in self.tables},
        }


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def _key_columns(conn: asyncpg.Connection, schema: str, table: str) -> list[str]:
    rows = await conn.fetch(
        "SELECT a.attname FROM pg_index i"
        " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
        " WHERE i.indrelid = (quote_ident($1) || '.' || quote_ident($2))::regclass"
        " AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)",
        schema,
        table,
    )
    return [r["attname"] for r in rows]


async def _compare(
    conn: asyncpg.Connection, live: str, scratch: str, table: str
) -> TableDifferences:
    def rows_of(a: str, b: str) -> str:
        return (
            f"SELECT to_jsonb(t) AS row FROM {_ident(a)}.{_ident(table)} t EXCEPT ALL"
            f" SELECT to_jsonb(t) FROM {_ident(b)}.{_ident(table)} t"
        )

    live_only = [r["row"] for r in await conn.fetch(rows_of(live, scratch))]
    log_only = [r["row"] for r in await conn.fetch(rows_of(scratch, live))]
    key = await _key_columns(conn, live, table)
    return TableDifferences(table, differences(live_only, log_only, key))


async def verify_projection(
    pool: asyncpg.Pool, eventlog: EventLog, projection: Projection
) -> Verified:
    scratch = f"o_verify_{uuid.uuid4().hex[:12]}"
    async with pool.acquire() as conn:
        transaction = conn.transaction(isolation="repeatable_read")
        await transaction.start()
        try:
            live = await conn.fetchval("SELECT current_schema()")
            position = await conn.fetchval(
                "SELECT last_seq FROM projection_checkpoints WHERE projection = $1",
                projection.name,
            )
            await conn.execute(f"CREATE SCHEMA {_ident(scratch)}")
            for table in [*projection.tables, "projection_checkpoints"]:
                await conn.execute(
                    f"CREATE TABLE {_ident(scratch)}.{_ident(table)}"
                    f" (LIKE {_ident(live)}.{_ident(table)} INCLUDING ALL)"
                )
            await conn.execute(f"SET LOCAL search_path TO {_ident(scratch)}, {_ident(live)}")
            done = await Projector(projection, pool, eventlog).replay_into(
                conn, until=position or 0
            )
            compared = [await _compare(conn, live, scratch, t) for t in projection.tables]
        finally:
            await transaction.rollback()
    # (A fresh connection next time: none of this one's cached statements name the scratch
    # schema.)
    await pool.expire_connections()
    return Verified(
        projection=projection.name,
        position=position or 0,
        replayed=done.replayed,
        skipped=done.skipped,
        tables=[t for t in compared if t.rows],
    )
