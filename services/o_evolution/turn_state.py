"""Where a sleep-time group's turns stand, read from the runs projection's `sleeptime_turns`.

One reading for the two that need it: the evolution service, which decides the
next turn on it, and the gateway, which shows it (Letta's Group.turns_counter and
last_processed_message_id).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

_LAST_TURN = (
    "SELECT turns_counter,"
    " (SELECT last_processed_message_id FROM sleeptime_turns p WHERE p.group_id = $1"
    "  AND p.last_processed_message_id IS NOT NULL ORDER BY seq DESC LIMIT 1) AS processed"
    " FROM sleeptime_turns WHERE group_id = $1 ORDER BY seq DESC LIMIT 1"
)


@dataclass(frozen=True)
class LastTurn:
    counter: int
    # The last manager message the companions have read (None: none yet).
    last_processed: str | None


async def last_turn(conn: asyncpg.Pool | asyncpg.Connection, group_id: str) -> LastTurn | None:
    """The group's last counted turn; None before its first."""
    row = await conn.fetchrow(_LAST_TURN, group_id)
    return None if row is None else LastTurn(row["turns_counter"], row["processed"])
