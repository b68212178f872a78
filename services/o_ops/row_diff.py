"""Rows of a live projection table against the same table rebuilt from the log (no I/O).

Rows are compared whole (every column, as JSON); those found on one side only are paired
by the table's primary key, so a changed row reads as one difference naming its columns
rather than as a row missing and a row too many.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Row = Mapping[str, Any]


@dataclass(frozen=True)
class RowDifference:
    # changed: both have the key, with other values; live_only: the log has no such row
    # (a row added or kept by hand); log_only: the live table lacks a row the log makes.
    kind: Literal["changed", "live_only", "log_only"]
    key: dict[str, Any]
    # Column -> (live, from the log), for a changed row.
    columns: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    def describe(self, table: str) -> str:
        key = ", ".join(f"{k}={v}" for k, v in self.key.items())
        if self.kind == "changed":
            changes = "; ".join(
                f"{c}: live {_short(live)} but the log gives {_short(log)}"
                for c, (live, log) in self.columns.items()
            )
            return f"{table} ({key}): {changes}"
        if self.kind == "live_only":
            return f"{table} ({key}): in the live table, not made by the log"
        return f"{table} ({key}): made by the log, missing from the live table"

    def body(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "columns": {c: {"live": a, "log": b} for c, (a, b) in self.columns.items()},
        }


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _key(row: Row, key_columns: Sequence[str]) -> str:
    if not key_columns:
        return json.dumps(row, sort_keys=True, default=str)
    return json.dumps([row.get(c) for c in key_columns], default=str)


def differences(
    live_only: Sequence[Row], log_only: Sequence[Row], key_columns: Sequence[str]
) -> list[RowDifference]:
    """Pair the rows each side alone holds (whole-row comparison already done) by key."""
    rebuilt = {_key(r, key_columns): r for r in log_only}
    out: list[RowDifference] = []
    for row in live_only:
        k = _key(row, key_columns)
        key = {c: row.get(c) for c in key_columns}
        other = rebuilt.pop(k, None)
        if other is None or not key_columns:
            out.append(RowDifference("live_only", key or dict(row)))
            continue
        columns = {
            c: (row.get(c), other.get(c))
            for c in sorted(set(row) | set(other))
            if row.get(c) != other.get(c)
        }
        out.append(RowDifference("changed", key, columns))
    out += [
        RowDifference("log_only", {c: r.get(c) for c in key_columns} or dict(r))
        for r in rebuilt.values()
    ]
    return out
