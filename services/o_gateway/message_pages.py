"""Pages of stored messages, one step's tool results counting as one message.

Every list of messages (an agent's, a conversation's, a run's, all of them) pages
through this: a page holds `limit` groups (tool_return_groups.py: one step's tool
results are one group, any other message is one), never part of a group, and a
cursor that names a group (by any of its messages' ids) leaves all of it out. As
Letta, whose page of `limit` stored messages holds a step's results as one.

Rows are read in seq order past the cursors, `limit` + 1 groups at a time (a group
is known whole once the next one starts): one round trip unless the page ends in
a step with parallel tool calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import asyncpg
from fastapi import HTTPException

from o_gateway.state import checked_id
from o_gateway.tool_return_groups import StepKey, first_groups, more_rows_needed, step_key

Order = Literal["asc", "desc"]
UnknownCursor = Literal["ignored", "not_found"]


def row_key(row: asyncpg.Record) -> StepKey | None:
    """The group of a row with body, run_id and step_id."""
    return step_key(row["body"].get("role"), row["run_id"], row["step_id"])


@dataclass(frozen=True)
class Bound:
    """A cursor's row: where the page starts or ends, and the group it leaves out."""

    seq: int
    key: StepKey | None


async def bound_of(
    pool: asyncpg.Pool,
    relation: str,
    args: list[object],
    cursor: str | None,
    unknown_cursor: UnknownCursor,
) -> Bound | None:
    """The row `cursor` names in `relation` (a SELECT with id, seq, body, run_id and
    step_id over `args`), None for no cursor; one it does not hold is ignored or 404."""
    if not cursor:
        return None
    if unknown_cursor == "not_found":
        checked_id(cursor, "message")
    row = await pool.fetchrow(
        f"SELECT seq, run_id, step_id, body->>'role' AS role FROM ({relation}) t"
        f" WHERE id = ${len(args) + 1}",
        *args,
        cursor,
    )
    if row is None:
        if unknown_cursor == "not_found":
            raise HTTPException(404, f"{cursor} not found")
        return None
    return Bound(row["seq"], step_key(row["role"], row["run_id"], row["step_id"]))


async def message_page(
    pool: asyncpg.Pool,
    relation: str,
    args: list[object],
    before: str | None,
    after: str | None,
    limit: int,
    order: Order,
    *,
    cursors_follow_order: bool,
    unknown_cursor: UnknownCursor = "ignored",
) -> list[asyncpg.Record]:
    """A page of `relation`'s rows, in `order`: the first `limit` groups past the cursors.

    `after` means further along in `order` with `cursors_follow_order` (Letta's
    conversation and run routes), else newer (its agent-level and all-messages routes).
    Cursors name rows of `relation`.
    """
    found = [
        await bound_of(pool, relation, args, cursor, unknown_cursor) for cursor in (after, before)
    ]
    newer, older = found
    if cursors_follow_order and order == "desc":
        newer, older = older, newer
    left_out = {b.key for b in found if b is not None and b.key is not None}
    above = newer.seq if newer else None  # rows past these seqs, not at them
    below = older.seq if older else None
    n = len(args)
    query = (
        f"SELECT * FROM ({relation}) t WHERE (${n + 1}::bigint IS NULL OR seq > ${n + 1})"
        f" AND (${n + 2}::bigint IS NULL OR seq < ${n + 2})"
        f" ORDER BY seq {'ASC' if order == 'asc' else 'DESC'} LIMIT ${n + 3}"
    )
    rows: list[asyncpg.Record] = []
    wanted = limit + 1
    while wanted:
        batch = await pool.fetch(query, *args, above, below, wanted)
        rows += [r for r in batch if row_key(r) not in left_out]
        if len(batch) < wanted:
            break
        if order == "asc":
            above = batch[-1]["seq"]
        else:
            below = batch[-1]["seq"]
        wanted = more_rows_needed(rows, row_key, limit)
    return first_groups(rows, row_key, limit)
