"""Parameters written into a statement's text (o_runtime/sql_literals.py): what is written,
and what is refused so that the statement goes with its parameters instead.

That Postgres reads the literals back as the same values asyncpg would send is checked
against a real server in tests/integration/test_deferred_writes.py."""

from __future__ import annotations

import datetime as dt

import pytest
from asyncpg.types import Type

from o_runtime.sql_literals import NotInlinable, inline, literal

TEXT = Type(25, "text", "scalar", "pg_catalog")
INT8 = Type(20, "int8", "scalar", "pg_catalog")
BOOL = Type(16, "bool", "scalar", "pg_catalog")
JSONB = Type(3802, "jsonb", "scalar", "pg_catalog")
TEXTS = Type(1009, "text[]", "array", "pg_catalog")
TIMESTAMPTZ = Type(1184, "timestamptz", "scalar", "pg_catalog")
RANGE = Type(3904, "int4range", "range", "pg_catalog")


def test_each_placeholder_becomes_a_literal_cast_to_its_type() -> None:
    sql = inline(
        "UPDATE runs SET status = $2 WHERE id = $1 AND seq > $3",
        (TEXT, TEXT, INT8),
        ["r1", "done", 7],
    )
    assert sql == (
        """UPDATE runs SET status = 'done'::"pg_catalog"."text\""""
        """ WHERE id = 'r1'::"pg_catalog"."text" AND seq > '7'::"pg_catalog"."int8\""""
    )


def test_a_placeholder_used_twice_is_the_same_literal() -> None:
    assert (
        inline("VALUES ($1, $1)", (INT8,), [3])
        == """VALUES ('3'::"pg_catalog"."int8", '3'::"pg_catalog"."int8")"""
    )


def test_placeholders_inside_strings_and_quoted_names_are_left_alone() -> None:
    sql = inline("""SELECT '$1 it''s', "col$1", $1""", (TEXT,), ["x"])
    assert sql == """SELECT '$1 it''s', "col$1", 'x'::"pg_catalog"."text\""""


def test_quotes_in_values_are_doubled_and_nothing_else_changes() -> None:
    assert literal("it's \\n $1 -- not a comment", TEXT) == (
        """'it''s \\n $1 -- not a comment'::"pg_catalog"."text\""""
    )


def test_none_is_a_typed_null() -> None:
    assert literal(None, JSONB) == 'NULL::"pg_catalog"."jsonb"'


def test_json_is_written_as_the_pool_codec_encodes_it() -> None:
    # (o_runtime/db.py: json.dumps for json and jsonb, whatever the value: a str too)
    assert literal({"a": "it's"}, JSONB) == """'{"a": "it''s"}'::"pg_catalog"."jsonb\""""
    assert literal("plain", JSONB) == """'"plain"'::"pg_catalog"."jsonb\""""


def test_arrays_quote_their_elements() -> None:
    assert literal(['a"b', "c\\d", None, "e,f"], TEXTS) == (
        """'{"a\\"b","c\\\\d",NULL,"e,f"}'::"pg_catalog"."text"[]"""
    )


def test_times_are_sent_in_utc_as_asyncpg_sends_them() -> None:
    plus_two = dt.timezone(dt.timedelta(hours=2))
    value = dt.datetime(2026, 11, 28, 12, 0, tzinfo=plus_two)
    assert (
        literal(value, TIMESTAMPTZ)
        == """'2026-11-28T10:00:00+00:00'::"pg_catalog"."timestamptz\""""
    )
    assert literal(dt.datetime.max, TIMESTAMPTZ).startswith("'infinity'")


@pytest.mark.parametrize(
    ("sql", "types", "args"),
    [
        ("SELECT $$ $1 $$, $1", (TEXT,), ["x"]),  # a dollar quote could hide a placeholder
        ("SELECT E'\\' $1', $1", (TEXT,), ["x"]),  # so could an escape string
        ("SELECT $1 -- $2", (TEXT,), ["x"]),  # and a comment
        ("SELECT $1 /* $2 */", (TEXT,), ["x"]),
        ("SELECT $2", (TEXT,), ["x"]),  # no such argument
        ("SELECT $1", (TEXT, TEXT), ["x"]),  # arguments and parameters differ
    ],
)
def test_statements_that_could_hide_a_placeholder_are_refused(
    sql: str, types: tuple[Type, ...], args: list[object]
) -> None:
    with pytest.raises(NotInlinable):
        inline(sql, types, args)


@pytest.mark.parametrize(
    ("value", "pg_type"),
    [
        ("12", INT8),  # asyncpg refuses text for an integer: so does this
        (True, INT8),
        (1, BOOL),
        (5, TEXT),
        (["a"], TEXT),
        ("a", TEXTS),
        ("nul \x00 inside", TEXT),  # Postgres cannot hold it; the message would end there
        (dt.date(2026, 1, 1), TIMESTAMPTZ),
        ((1, 5), RANGE),  # kinds other than scalars and arrays go with their parameters
    ],
)
def test_values_asyncpg_would_not_send_as_that_type_are_refused(
    value: object, pg_type: Type
) -> None:
    with pytest.raises(NotInlinable):
        literal(value, pg_type)
