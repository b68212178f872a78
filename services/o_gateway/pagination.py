"""Keyset pagination, the way Letta's list routes page.

Cursors are resource ids. A list is ordered by a key of its table
(`created_at, id` for most, `seq` for messages and steps); a cursor stands
for its row's key, so a client that keeps asking with `after=<last id>`
walks the whole list once (the SDK's auto-paging does exactly that).

A cursor naming nothing is ignored, as Letta's agents, blocks and runs lists
do: a client that deletes while it iterates must not be stopped by a 404 for
the row it just deleted. Letta's message and step lists answer 404 instead;
those routes ask for that (`unknown_cursor="not_found"`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import asyncpg
from fastapi import HTTPException

from o_contracts.ids import IdPrefix
from o_gateway.state import checked_id

Order = Literal["asc", "desc"]
UnknownCursor = Literal["ignored", "not_found"]
T = TypeVar("T")


@dataclass
class Listing:
    """A list query: a WHERE clause built up with numbered asyncpg parameters."""

    table: str
    key: str = "created_at, id"
    columns: str = "*"
    where: list[str] = field(default_factory=lambda: ["true"])
    args: list[object] = field(default_factory=list)

    def param(self, value: object) -> str:
        self.args.append(value)
        return f"${len(self.args)}"

    def filter(self, clause: str, *values: object) -> None:
        """`clause` uses `{}` for each value, e.g. `filter("name = {}", name)`."""
        self.where.append(clause.format(*(self.param(v) for v in values)))

    async def count(self, pool: asyncpg.Pool) -> int:
        """How many rows the filters match (Letta's /count routes)."""
        n: int = await pool.fetchval(
            f"SELECT count(*) FROM {self.table} WHERE {' AND '.join(self.where)}", *self.args
        )
        return n

    async def page(
        self,
        pool: asyncpg.Pool,
        prefix: IdPrefix,
        before: str | None,
        after: str | None,
        order: Order,
        limit: int,
        *,
        cursors_follow_order: bool = True,
        unknown_cursor: UnknownCursor = "ignored",
    ) -> list[asyncpg.Record]:
        """The page's rows. `after` means further along in `order`, unless
        `cursors_follow_order` is off (Letta's messages: after is always newer)."""
        for cursor, forward in ((after, True), (before, False)):
            if not cursor:
                continue
            if unknown_cursor == "not_found":
                checked_id(cursor, prefix)
            if not await pool.fetchval(f"SELECT 1 FROM {self.table} WHERE id = $1", cursor):
                if unknown_cursor == "not_found":
                    raise HTTPException(404, f"{cursor} not found")
                continue
            ahead = (order == "asc") == forward if cursors_follow_order else forward
            row = f"(SELECT {self.key} FROM {self.table} WHERE id = {{}})"
            self.filter(f"({self.key}) {'>' if ahead else '<'} {row}", cursor)
        direction = "ASC" if order == "asc" else "DESC"
        order_by = ", ".join(f"{column.strip()} {direction}" for column in self.key.split(","))
        return list(
            await pool.fetch(
                f"SELECT {self.columns} FROM {self.table} WHERE {' AND '.join(self.where)}"
                f" ORDER BY {order_by} LIMIT {self.param(limit)}",
                *self.args,
            )
        )


def page_of(
    items: Sequence[T],
    key: Callable[[T], str],
    before: str | None,
    after: str | None,
    order: Order,
    limit: int,
) -> list[T]:
    """One page of a short list already held in memory, in ascending order.

    The same rules as `Listing.page`: `after` is further along in `order`,
    `before` is nearer its start, and a cursor naming no item is ignored.
    """
    ordered = list(items) if order == "asc" else list(reversed(items))
    keys = [key(item) for item in ordered]
    start, end = 0, len(ordered)
    if after in keys:
        start = keys.index(after) + 1
    if before in keys:
        end = keys.index(before)
    return ordered[start:end][:limit]
