"""Which asyncio event loop a service runs on.

uvloop (libuv, by asyncpg's authors) unless `O_EVENT_LOOP=asyncio`. Its transports,
TLS among them, are compiled: asyncio's own TLS transport is Python, and every NATS message
and Postgres round trip a step makes passes through it when TLS is on (bench/README
"Everything on against everything off"). `asyncio` stays selectable to tell a loop problem
from an O problem, and is what runs where uvloop has no wheel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from o_runtime.env import BadSetting, Env

EVENT_LOOP_ENV = "O_EVENT_LOOP"
LOOPS = ("uvloop", "asyncio")

T = TypeVar("T")


def loop_factory(env: Env) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory for the loop `O_EVENT_LOOP` names (None: asyncio's default)."""
    name = env.text(EVENT_LOOP_ENV, "uvloop")
    if name not in LOOPS:
        raise BadSetting(f"{EVENT_LOOP_ENV} must be one of {', '.join(LOOPS)}, not {name!r}")
    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # no wheel for this platform: asyncio's loop does the same job
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], factory: Callable[[], asyncio.AbstractEventLoop] | None) -> T:
    """asyncio.run on the chosen loop (asyncio.Runner: 3.11 has no asyncio.run(loop_factory))."""
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
