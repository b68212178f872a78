"""A projection's transaction as one message (o_runtime/deferred_writes.py), against a real
Postgres: the literals written into the text are the values asyncpg would have sent, the
claim, the writes and the commit go together, and a lost claim or a failing statement
applies nothing."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from pgvector import Vector

from o_runtime.deferred_writes import ClaimLost, DeferredWrites
from o_runtime.sql_literals import inline

# Every type the projections write, and values that are easy to get wrong.
_COLUMNS = {
    "t": ("text", ["", "it's", 'say "hi"', "back\\slash \\x41", "$1 -- /* */", "é 中 😀", "\n\t"]),
    "i8": ("int8", [0, -1, 2**63 - 1, -(2**63)]),
    "i4": ("int4", [7, -2147483648]),
    "f8": ("float8", [0.1, -1e300, float("inf"), float("-inf"), 3, 1.0000000000000002]),
    "n": ("numeric", [decimal.Decimal("1.10"), decimal.Decimal("-0.000001"), 5, 2.5]),
    "b": ("bool", [True, False]),
    "js": ("jsonb", [{"a": ["it's", 'q"', "\\"], "n": None}, "plain", [1, 2.5], None, 3]),
    "j": ("json", [{"k": "v w"}, ["x"]]),
    "ts": (
        "timestamptz",
        [
            dt.datetime(2026, 11, 28, 12, 30, 1, 123456, tzinfo=dt.UTC),
            dt.datetime(2026, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
            dt.datetime(2026, 6, 1, 8, 0),  # naive: as asyncpg, local time
            dt.datetime.max,
            dt.datetime.min,
        ],
    ),
    "tsn": ("timestamp", [dt.datetime(2026, 3, 4, 5, 6, 7, 8)]),
    "d": ("date", [dt.date(2026, 2, 28), dt.date.max]),
    "iv": ("interval", [dt.timedelta(days=-3, seconds=5, microseconds=7), dt.timedelta(0)]),
    "by": ("bytea", [b"", b"\x00\x01'\\", bytearray(b"abc")]),
    "u": ("uuid", [uuid.UUID(int=1), str(uuid.UUID(int=2))]),
    "ta": ("text[]", [[], ["a", None, 'b"c', "d\\e", "f,g", "{h}", "NULL", " "], [["a", "b"]]]),
    "ia": ("int8[]", [[1, None, -3]]),
    "ja": ("jsonb[]", [[{"a": 1}, None]]),
    "v": ("vector(3)", [[1.0, 2.5, -3.0], Vector([0.0, 0.0, 1e-7])]),
}


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    async with pool.acquire() as c:
        columns = ", ".join(f"{name} {kind}" for name, (kind, _) in _COLUMNS.items())
        await c.execute(f"CREATE TABLE kinds (id int PRIMARY KEY, {columns})")
        await c.execute("CREATE TABLE facts (id int PRIMARY KEY, note text NOT NULL)")
        await c.execute(
            "INSERT INTO projection_checkpoints (projection, last_seq) VALUES ('p', 10)"
        )
        yield c


def opening(expected: int, through: int) -> str:
    return f"BEGIN; SELECT o_claim_checkpoint('p', {expected}, {through}, 'o_projection')"


async def checkpoint(conn: asyncpg.Connection) -> int:
    seq: int = await conn.fetchval(
        "SELECT last_seq FROM projection_checkpoints WHERE projection = 'p'"
    )
    return seq


@pytest.mark.parametrize("column", list(_COLUMNS))
async def test_literals_are_read_back_as_the_values_asyncpg_sends(
    conn: asyncpg.Connection, column: str
) -> None:
    values = _COLUMNS[column][1]
    sql = f"INSERT INTO kinds (id, {column}) VALUES ($1, $2)"
    types = (await conn.prepare(sql)).get_parameters()
    for i, value in enumerate(values):
        await conn.execute(sql, 2 * i, value)
        await conn.execute(inline(sql, types, [2 * i + 1, value]))
    rows = await conn.fetch(f"SELECT id, {column}::text AS shown FROM kinds ORDER BY id")
    sent = [r["shown"] for r in rows if r["id"] % 2 == 0]
    written = [r["shown"] for r in rows if r["id"] % 2 == 1]
    assert written == sent and len(sent) == len(values)


async def test_a_transaction_of_writes_goes_as_one_message(conn: asyncpg.Connection) -> None:
    queries: list[str] = []
    notices: list[str] = []

    def notified(*args: object) -> None:
        notices.append(str(args[3]))

    await conn.add_listener("o_projection", notified)
    writes = DeferredWrites(conn, opening(10, 12))
    await writes.execute("INSERT INTO facts VALUES ($1, $2)", 1, "one")
    await writes.execute("UPDATE facts SET note = note || $2 WHERE id = $1", 1, " and more")
    await writes.execute("INSERT INTO facts VALUES (2, 'two')")
    with conn.query_logger(lambda record: queries.append(record.query)):
        await writes.commit()
        # (notifications come with the next message's answer; loggers run soon after)
        await conn.execute("SELECT 1")
    await conn.remove_listener("o_projection", notified)
    assert writes.messages == 1
    assert queries[0].startswith("BEGIN;") and queries[0].endswith("COMMIT")
    assert set(queries[1:]) <= {"SELECT 1"}
    assert [tuple(r) for r in await conn.fetch("SELECT * FROM facts ORDER BY id")] == [
        (1, "one and more"),
        (2, "two"),
    ]
    assert await checkpoint(conn) == 12
    assert notices == ["p:12"]


async def test_a_read_sends_the_writes_before_it_and_sees_them(conn: asyncpg.Connection) -> None:
    writes = DeferredWrites(conn, opening(10, 11))
    await writes.execute("INSERT INTO facts VALUES ($1, $2)", 1, "one")
    assert await writes.fetchval("SELECT note FROM facts WHERE id = $1", 1) == "one"
    await writes.execute("INSERT INTO facts VALUES ($1, $2)", 2, "two")
    await writes.commit()
    assert writes.messages == 2
    assert await conn.fetchval("SELECT count(*) FROM facts") == 2


async def test_a_lost_claim_applies_nothing(conn: asyncpg.Connection) -> None:
    writes = DeferredWrites(conn, opening(9, 11))  # the checkpoint is at 10, not 9
    await writes.execute("INSERT INTO facts VALUES ($1, $2)", 1, "one")
    with pytest.raises(ClaimLost):
        await writes.commit()
    await conn.execute("ROLLBACK")
    assert await conn.fetchval("SELECT count(*) FROM facts") == 0
    assert await checkpoint(conn) == 10


async def test_a_failing_statement_fails_the_whole_transaction_as_before(
    conn: asyncpg.Connection,
) -> None:
    writes = DeferredWrites(conn, opening(10, 11))
    await writes.execute("INSERT INTO facts VALUES ($1, $2)", 1, "one")
    await writes.execute("INSERT INTO facts VALUES ($1, $2)", 1, "again")
    # The same error class the statement raises alone (the projector decides by it).
    with pytest.raises(asyncpg.UniqueViolationError):
        await writes.commit()
    await conn.execute("ROLLBACK")
    assert await conn.fetchval("SELECT count(*) FROM facts") == 0
    assert await checkpoint(conn) == 10


async def test_what_cannot_be_written_as_a_literal_goes_with_its_parameters(
    conn: asyncpg.Connection,
) -> None:
    await conn.execute("CREATE TABLE spans (id int, r int4range)")
    writes = DeferredWrites(conn, opening(10, 11))
    await writes.execute("INSERT INTO facts VALUES ($1, $2)", 1, "one")
    await writes.execute("INSERT INTO spans VALUES ($1, $2)", 1, asyncpg.Range(1, 5))
    await writes.execute("INSERT INTO facts VALUES ($1, $2)", 2, "two")
    await writes.commit()
    assert writes.messages == 2  # the kept writes went first, then the range alone
    assert await conn.fetchval("SELECT r::text FROM spans") == "[1,5)"
    assert await conn.fetchval("SELECT count(*) FROM facts") == 2
    assert await checkpoint(conn) == 11


async def test_writes_to_a_connection_whose_strings_are_not_standard_go_one_by_one(
    conn: asyncpg.Connection,
) -> None:
    await conn.execute("SET standard_conforming_strings TO off")
    try:
        writes = DeferredWrites(conn, opening(10, 11))
        await writes.execute("INSERT INTO facts VALUES ($1, $2)", 1, "back\\slash 'q'")
        await writes.commit()
        assert writes.messages == 2
        assert await conn.fetchval("SELECT note FROM facts") == "back\\slash 'q'"
    finally:
        await conn.execute("RESET standard_conforming_strings")
