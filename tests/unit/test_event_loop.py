"""O_EVENT_LOOP: which event loop the services run on (o_runtime/event_loop.py)."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from o_runtime.env import BadSetting, Env
from o_runtime.event_loop import EVENT_LOOP_ENV, loop_factory, run


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


def test_services_run_on_uvloop_unless_told_otherwise() -> None:
    assert run(_loop_type(), loop_factory(Env({}))) is uvloop.Loop


def test_asyncio_names_the_standard_librarys_loop() -> None:
    chosen = run(_loop_type(), loop_factory(Env({EVENT_LOOP_ENV: "asyncio"})))
    assert chosen is not uvloop.Loop
    assert issubclass(chosen, asyncio.BaseEventLoop)


def test_an_unknown_loop_is_refused_with_the_choices() -> None:
    with pytest.raises(BadSetting, match="uvloop, asyncio"):
        loop_factory(Env({EVENT_LOOP_ENV: "trio"}))
