"""The executor's history reads: the runs projection's rows, parsed once per process."""

from __future__ import annotations

import datetime as dt
import itertools

import asyncpg

from o_contracts.models import ChatMessage
from o_contracts.subjects import Lane
from o_executor.history import HistoryCache

AGENT = "agent-history"
_seq = itertools.count(1)


async def add(pool: asyncpg.Pool, run_id: str, role: str, text: str) -> ChatMessage:
    message = ChatMessage(id=f"message-{text}", role=role, content=text)
    await pool.execute(
        "INSERT INTO messages (id, agent_id, run_id, role, body, seq, created_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7)",
        message.id,
        AGENT,
        run_id,
        role,
        message.model_dump(mode="json"),
        next(_seq),
        dt.datetime.now(dt.UTC),
    )
    return message


def texts(history: list[ChatMessage]) -> list[str | None]:
    return [m.content for m in history]


async def test_the_history_is_read_in_order_and_parsed_once(pool: asyncpg.Pool) -> None:
    cache = HistoryCache(pool)
    await add(pool, "run-1", "user", "hi")
    await add(pool, "run-1", "assistant", "hello")
    first = await cache.load(Lane(AGENT), exclude_run="run-2")
    assert texts(first) == ["hi", "hello"]

    await add(pool, "run-2", "user", "again")
    await add(pool, "run-2", "assistant", "yes")
    second = await cache.load(Lane(AGENT), exclude_run="run-3")
    assert texts(second) == ["hi", "hello", "again", "yes"]
    # The first two come from this process's cache, not parsed again.
    assert second[0] is first[0] and second[1] is first[1]


async def test_evicted_messages_leave_and_a_resumed_runs_own_come_back(
    pool: asyncpg.Pool,
) -> None:
    cache = HistoryCache(pool)
    await add(pool, "run-1", "user", "old")
    await add(pool, "run-2", "user", "resumed")  # projected before its run resumed
    await add(pool, "run-3", "user", "later")
    # Run 2, resumed, reads the history without its own messages.
    assert texts(await cache.load(Lane(AGENT), exclude_run="run-2")) == ["old", "later"]
    # Summarized: "old" is out of context now.
    await pool.execute("UPDATE messages SET in_context = false WHERE id = 'message-old'")
    # The next run sees run 2's message (below what the cache has seen, never parsed here).
    assert texts(await cache.load(Lane(AGENT), exclude_run="run-4")) == ["resumed", "later"]


async def test_a_history_read_rides_in_another_statement(pool: asyncpg.Pool) -> None:
    # As a run reads it: beside its own record, in one round trip (LiveRun._state_at).
    cache = HistoryCache(pool)
    lane = Lane("agent-riding")
    await pool.execute(
        "INSERT INTO messages (id, agent_id, run_id, role, body, seq, created_at)"
        " SELECT 'message-' || n, $1, 'run-1', 'user', jsonb_build_object('id', 'message-' || n,"
        " 'role', 'user', 'content', 'm' || n), 1000 + n, now() FROM generate_series(1, 3) n",
        lane.key,
    )
    record = "SELECT $1::text AS run_id WHERE $1 = 'run-2'"

    async def read(run_id: str) -> tuple[list[ChatMessage], str | None]:
        history = cache.begin(lane, exclude_run=run_id, first_param=2)
        async with pool.acquire() as conn:
            row = await conn.fetchrow(
                f"SELECT h.*, r.* FROM ({history.sql}) AS h LEFT JOIN ({record}) AS r ON true",
                run_id,
                *history.args,
            )
            return await cache.complete(history, row, conn), row["run_id"] if row else None

    first, found = await read("run-2")
    assert (texts(first), found) == (["m1", "m2", "m3"], "run-2")
    # Bodies this process parsed are not carried again, and it hands the same messages out.
    again, _ = await read("run-2")
    assert texts(again) == ["m1", "m2", "m3"] and again[0] is first[0]
    # Run 1's own messages left out, and no record of it: the history's row still comes.
    assert await read("run-1") == ([], None)
