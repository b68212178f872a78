"""The read fence against real Postgres (o_gateway/read_fence.py): a notification
committed before a fence is always counted by it, and nothing is vouched for while its
connection is down."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from o_contracts import projection_names
from o_gateway.read_fence import APPLICATION_NAME, ReadFence
from o_runtime.projector import notify_channel
from tests.integration import conftest

ROUNDS = 300


@pytest.fixture
async def fence(database_url: str) -> AsyncIterator[ReadFence]:
    f = ReadFence(database_url)
    await f.start()
    yield f
    await f.stop()


async def test_a_commit_notified_before_the_fence_is_always_counted(
    fence: ReadFence, database_url: str
) -> None:
    committer = await asyncpg.connect(database_url)
    try:
        missed = 0
        for i in range(ROUNDS):
            before = await fence.fence()
            assert before is not None
            # Committed (autocommit) before the fence is asked for, as a projector's
            # transaction is before a write is acknowledged; by each projection in turn
            # (each notifies on a channel of its own).
            projection = projection_names.ALL[i % len(projection_names.ALL)]
            await committer.execute(
                "SELECT pg_notify($1, $2)", notify_channel(projection), f"{projection}:{i}"
            )
            after = await fence.fence()
            assert after is not None
            missed += after <= before
        assert missed == 0
    finally:
        await committer.close()


async def test_concurrent_fences_share_round_trips_and_agree(fence: ReadFence) -> None:
    answers = await asyncio.gather(*(fence.fence() for _ in range(200)))
    assert len(set(answers)) == 1 and answers[0] is not None


async def until(condition: object, fence: ReadFence) -> int | None:
    async with asyncio.timeout(10):
        while True:
            answer = await fence.fence()
            if condition == "down" and answer is None:
                return None
            if condition == "up" and answer is not None:
                return answer
            await asyncio.sleep(0.02)


async def test_while_its_connection_is_lost_the_fence_vouches_for_nothing(
    fence: ReadFence, database_url: str
) -> None:
    before = await fence.fence()
    assert before is not None
    admin = await asyncpg.connect(database_url)
    try:
        killed = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = $1 AND datname = current_database()",
            APPLICATION_NAME,
        )
        assert killed == 1
    finally:
        await admin.close()
    assert await until("down", fence) is None
    # Back, listening again: a generation no answer kept before the loss can have.
    after = await until("up", fence)
    assert after is not None and after > before


async def test_a_connection_closed_unannounced_is_made_again(
    fence: ReadFence, database_url: str
) -> None:
    """asyncpg does not always call termination listeners: a fence whose connection closed
    without them connects again by itself, rather than telling of commits that no longer
    come until some round trip fails."""
    closed = fence._conn
    assert closed is not None
    closed.remove_termination_listener(fence._lost)  # as asyncpg may not call it
    backend = closed.get_server_pid()
    admin = await asyncpg.connect(database_url)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", backend)
    finally:
        await admin.close()

    def made_again() -> bool:
        return fence._conn is not None and fence._conn is not closed

    await conftest.until(made_again, "the fence connected again")
    assert fence._conn is not None and not fence._conn.is_closed()
    assert fence._conn.get_server_pid() != backend
