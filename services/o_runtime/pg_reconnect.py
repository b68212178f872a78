"""Reconnecting a Postgres connection that listens for notifications.

The projection watcher (waiting.py) and the gateway's read fence (o_gateway/read_fence.py)
each hold one LISTEN connection; when Postgres goes away they try again every half second
until it is back or they are stopped, as a pool would for its own connections.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg

RECONNECT_DELAY = 0.5


async def keep_connecting(
    connect: Callable[[], Awaitable[None]],
    stopping: Callable[[], bool],
    delay: float = RECONNECT_DELAY,
) -> None:
    """Call `connect` until it succeeds or `stopping()` says to give up; an unreachable or
    refusing Postgres is tried again after `delay`."""
    while not stopping():
        try:
            await connect()
            return
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            await asyncio.sleep(delay)
