"""A statement's parameters written into its text, so that several statements go in one message.

asyncpg sends every parameterised statement on its own and waits for its answer: a
projection's transaction of one event (claim the checkpoint, the handler's statement, commit)
costs three round trips, and with TLS to Postgres each round trip costs both ends CPU
(bench/README.md, "TLS"). Postgres' simple query protocol runs several statements sent as
one message, but it takes no parameters. So `inline` writes each parameter as a literal of
the type Postgres itself inferred for it (asyncpg's `PreparedStatement.get_parameters`),
from the value as asyncpg would have sent it:

    inline("UPDATE runs SET status = $1 WHERE id = $2", types, ["completed", "run-1"])
    -> UPDATE runs SET status = 'completed'::"pg_catalog"."text" WHERE id = 'run-1'::...

Only what the projections pass is written (numbers, booleans, text, json and jsonb as the
pool's codec encodes them, times, intervals, bytea, uuid, pgvector's vector, arrays of
those), and only as strictly as asyncpg would accept it: a value asyncpg would refuse for a
type (text for an integer, say) raises NotInlinable, and the caller sends that statement
the ordinary way, where it fails as it always did. The statement's text is read only for
its placeholders; quoting that could hide one (dollar quotes, escape strings, comments) also
raises NotInlinable. Literals are standard SQL strings, so the message that carries them
must set `standard_conforming_strings` (deferred_writes.py does, for its transaction).
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import json
import math
import re
import uuid
from collections.abc import Sequence
from typing import Any, cast

from asyncpg.types import Type
from pgvector import Vector


class NotInlinable(Exception):
    """This statement or value is sent with its parameters, not written into the text."""


_INTEGERS = frozenset({"int2", "int4", "int8", "oid"})
_NUMBERS = frozenset({"float4", "float8", "numeric"})
_TEXTS = frozenset({"text", "varchar", "bpchar", "name", "citext"})
_JSON = frozenset({"json", "jsonb"})

# What a placeholder can hide in: a string, a quoted identifier, a comment, a dollar quote.
_TOKENS = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|\$\d+|\$|--|/\*|[eE]'""")


def inline(sql: str, types: Sequence[Type], args: Sequence[object]) -> str:
    """`sql` with each `$n` replaced by `args[n-1]` as a literal of `types[n-1]`."""
    if len(types) != len(args):
        raise NotInlinable(f"{len(args)} arguments for {len(types)} parameters")
    texts, numbers = _template(sql)
    literals: dict[int, str] = {}
    parts = [texts[0]]
    for n, text in zip(numbers, texts[1:], strict=True):
        if not 1 <= n <= len(args):
            raise NotInlinable(f"no argument for ${n}")
        if n not in literals:
            literals[n] = literal(args[n - 1], types[n - 1])
        parts += (literals[n], text)
    return "".join(parts)


@functools.lru_cache(maxsize=2048)
def _template(sql: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """`sql` cut at its placeholders: the texts around them and each one's number.

    (Kept per statement text: a projection sends the same few statements again and again,
    and reading one for its placeholders took a tenth of a rebuild's time.)
    """
    texts: list[str] = []
    numbers: list[int] = []
    start = 0
    for match in _TOKENS.finditer(sql):
        token = match.group(0)
        if token[0] in "'\"":
            continue
        if token[0] != "$" or len(token) == 1:
            raise NotInlinable(f"{token!r} in the statement")
        texts.append(sql[start : match.start()])
        numbers.append(int(token[1:]))
        start = match.end()
    texts.append(sql[start:])
    return tuple(texts), tuple(numbers)


def literal(value: object, pg_type: Type) -> str:
    """`value` as a literal of `pg_type`, cast to it."""
    if value is None:
        return f"NULL::{_type_name(pg_type)}"
    if pg_type.kind == "array":
        text = _array_text(value, pg_type.name.removesuffix("[]"))
    elif pg_type.kind == "scalar":
        text = _text(value, pg_type.name)
    else:
        raise NotInlinable(f"a {pg_type.kind} parameter ({pg_type.name})")
    return f"{_quoted(text)}::{_type_name(pg_type)}"


def _type_name(pg_type: Type) -> str:
    base = pg_type.name.removesuffix("[]")
    name = f"{_identifier(pg_type.schema)}.{_identifier(base)}"
    return f"{name}[]" if pg_type.kind == "array" else name


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _quoted(text: str) -> str:
    if "\x00" in text:
        # (Postgres cannot hold it, and the message's text would end there.)
        raise NotInlinable("a NUL character")
    return "'" + text.replace("'", "''") + "'"


def _array_text(value: object, element: str) -> str:
    if not isinstance(value, list | tuple):
        raise NotInlinable(f"{type(value).__name__} for an array")
    items = []
    for item in value:
        if item is None:
            items.append("NULL")
        elif isinstance(item, list | tuple):
            items.append(_array_text(item, element))
        else:
            text = _text(item, element)
            items.append('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "{" + ",".join(items) + "}"


def _text(value: object, name: str) -> str:
    """The text Postgres reads as `value` of the type called `name` (as asyncpg would send
    it; else NotInlinable)."""
    if name in _JSON:
        # The pool's codec (o_runtime/db.py): whatever the value, json.dumps of it.
        return json.dumps(value)
    if name == "bool":
        if isinstance(value, bool):
            return "true" if value else "false"
    elif name in _INTEGERS:
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    elif name in _NUMBERS:
        if isinstance(value, float):
            return _float(value)
        if isinstance(value, int | decimal.Decimal) and not isinstance(value, bool):
            return str(value)
    elif name in _TEXTS:
        if isinstance(value, str):
            return value
    elif name == "uuid":
        if isinstance(value, str | uuid.UUID):
            return str(value)
    elif name == "timestamptz":
        if isinstance(value, dt.datetime):
            return _infinite(value, dt.datetime) or value.astimezone(dt.UTC).isoformat()
    elif name == "timestamp":
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            return _infinite(value, dt.datetime) or value.isoformat()
    elif name == "date":
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return _infinite(value, dt.date) or value.isoformat()
    elif name == "interval":
        if isinstance(value, dt.timedelta):
            return f"{value.days} days {value.seconds} seconds {value.microseconds} microseconds"
    elif name == "bytea":
        if isinstance(value, bytes | bytearray | memoryview):
            return "\\x" + bytes(value).hex()
    elif name == "vector":
        # pgvector's codec (o_runtime/db.py) takes a Vector or anything Vector() takes.
        try:
            vector = value if isinstance(value, Vector) else Vector(cast(Any, value))
            return str(vector.to_text())
        except (TypeError, ValueError) as exc:
            raise NotInlinable(f"not a vector: {exc}") from None
    raise NotInlinable(f"{type(value).__name__} for {name}")


def _float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value)


def _infinite(value: dt.date, kind: type[dt.date]) -> str | None:
    """asyncpg sends the type's max and min as Postgres' infinity and -infinity."""
    if value == kind.max or (isinstance(value, dt.datetime) and _naive(value) == dt.datetime.max):
        return "infinity"
    if value == kind.min or (isinstance(value, dt.datetime) and _naive(value) == dt.datetime.min):
        return "-infinity"
    return None


def _naive(value: dt.datetime) -> dt.datetime:
    return value.replace(tzinfo=None)
