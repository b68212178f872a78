"""Wait for something to show in the log: hear its events on core NATS, and look anyway.

A waiter subscribes to the event subject, then looks (the subject's last sequence, a
projection at it). What it hears wakes it to look again at once. Hearing alone is not
enough, for three reasons, so it also looks again after a pause, whatever it heard:

- JetStream routes a message to core subscribers first and stores it afterwards (the
  stream takes its messages from a queue of its own). A message routed just before
  the waiter's SUB reached the server can be stored just after its first look:
  neither heard nor seen.
- For the same reason a message heard may not be stored yet when the look it
  prompted asks for the subject's last sequence.
- Core NATS drops what is published while the connection is reconnecting.

Each of these is a window of milliseconds (or a reconnection), so the first look
again comes soon (FIRST_PAUSE) and the pauses double up to MAX_PAUSE; news starts
them from the first again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

T = TypeVar("T")

FIRST_PAUSE = 0.05
MAX_PAUSE = 2.0


def pauses(first: float = FIRST_PAUSE, most: float = MAX_PAUSE) -> Callable[[bool], float]:
    """How long to wait before the next look: `first` after news, doubling without."""
    pause = first / 2

    def after(heard: bool) -> float:
        nonlocal pause
        pause = first if heard else min(pause * 2, most)
        return pause

    return after


async def look_until(
    nc: NATS,
    subject: str,
    heard: Callable[[Msg], bool],
    look: Callable[[], Awaitable[T | None]],
    timeout: float,
    first_pause: float = FIRST_PAUSE,
) -> T | None:
    """The first thing `look` finds within `timeout` seconds; None if it finds nothing.

    `heard` says whether a message on `subject` is news worth looking again for.
    """
    news = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        if heard(msg):
            news.set()

    # Listen first, then look: what is routed after the SUB is heard.
    sub = await nc.subscribe(subject, cb=on_msg)
    next_pause = pauses(first_pause)
    try:
        async with asyncio.timeout(timeout):
            was_news = False
            while True:
                news.clear()
                found = await look()
                if found is not None:
                    return found
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(news.wait(), next_pause(was_news))
                was_news = news.is_set()
    except TimeoutError:
        return None
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
