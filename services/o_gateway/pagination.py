"""Keyset pagination over (created_at, id), the way Letta's list routes page.

Cursors are resource ids; `after` means further along in the chosen order,
so a client that keeps asking with `after=<last id>` walks the whole list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from o_contracts.ids import IdPrefix
from o_gateway.state import checked_id

Order = Literal["asc", "desc"]


@dataclass
class Listing:
    """A list query: a WHERE clause built up with numbered asyncpg parameters."""

    table: str
    where: list[str] = field(default_factory=lambda: ["true"])
    args: list[object] = field(default_factory=list)

    def param(self, value: object) -> str:
        self.args.append(value)
        return f"${len(self.args)}"

    def filter(self, clause: str, *values: object) -> None:
        """`clause` uses `{}` for each value, e.g. `filter("name = {}", name)`."""
        self.where.append(clause.format(*(self.param(v) for v in values)))

    def page(
        self, prefix: IdPrefix, before: str | None, after: str | None, order: Order, limit: int
    ) -> str:
        for cursor, forward in ((after, True), (before, False)):
            if cursor:
                checked_id(cursor, prefix)
                op = ">" if (order == "asc") == forward else "<"
                row = f"(SELECT created_at, id FROM {self.table} WHERE id = {{}})"
                self.filter(f"(created_at, id) {op} {row}", cursor)
        direction = "ASC" if order == "asc" else "DESC"
        return (
            f"SELECT * FROM {self.table} WHERE {' AND '.join(self.where)}"
            f" ORDER BY created_at {direction}, id {direction} LIMIT {self.param(limit)}"
        )
