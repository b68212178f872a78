"""Waiting for the log (o_runtime/log_news.py) against a real NATS server: what is heard
wakes a waiter at once, and what is never heard is found by looking again."""

from __future__ import annotations

import asyncio

from nats.aio.msg import Msg

from o_runtime.eventlog import EventLog
from o_runtime.log_news import look_until, pauses

SUBJECT = "test.log-news"


def news(msg: Msg) -> bool:
    return msg.data == b"news"


async def test_what_is_never_heard_is_found_by_looking_again(eventlog: EventLog) -> None:
    # The first look raced the store (the message was routed before the SUB and
    # stored after the look): nothing is ever heard, the second look finds it.
    looks = 0

    async def look() -> str | None:
        nonlocal looks
        looks += 1
        return "found" if looks == 2 else None

    assert await look_until(eventlog.nc, SUBJECT, news, look, timeout=5.0) == "found"
    assert looks == 2


async def test_news_heard_wakes_the_waiter_at_once(eventlog: EventLog) -> None:
    # Pauses longer than the timeout: only the message heard can wake it in time.
    there = False
    looked = asyncio.Event()

    async def look() -> str | None:
        looked.set()
        return "found" if there else None

    async def publish() -> None:
        nonlocal there
        await looked.wait()
        there = True
        await eventlog.nc.publish(SUBJECT, b"news")

    publisher = asyncio.create_task(publish())
    found = await look_until(eventlog.nc, SUBJECT, news, look, timeout=5.0, first_pause=60.0)
    await publisher
    assert found == "found"


async def test_nothing_found_within_the_timeout_is_none(eventlog: EventLog) -> None:
    looks = 0

    async def look() -> str | None:
        nonlocal looks
        looks += 1
        return None

    assert await look_until(eventlog.nc, SUBJECT, news, look, timeout=0.3) is None
    assert looks >= 2  # looked again while it waited
    # The subscription is gone with the wait.
    assert not [s for s in eventlog.nc._subs.values() if s.subject == SUBJECT]


def test_pauses_double_without_news_and_start_again_after_it() -> None:
    after = pauses(first=0.05, most=0.4)
    assert [after(False) for _ in range(5)] == [0.05, 0.1, 0.2, 0.4, 0.4]
    assert after(True) == 0.05
    assert after(False) == 0.1
