"""A flush given up on leaves the connection hearing (o_runtime/nats_flush.py), on a real
nats-server frozen by SIGSTOP: its connections stay open, its PONG comes late."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from o_devtools.supervisor import ServerKeeper
from o_runtime.nats_flush import flush
from tests.integration.conftest import server_operator


@pytest.fixture
async def connect(nats_keeper: ServerKeeper) -> AsyncIterator[Callable[[], Awaitable[NATS]]]:
    server = nats_keeper.server
    clients: list[NATS] = []

    async def new() -> NATS:
        client = await nats.connect(server.url, **server_operator(server).options())
        clients.append(client)
        return client

    yield new
    for client in clients:
        await client.close()


async def heard_after_a_late_pong(
    nats_keeper: ServerKeeper,
    connect: Callable[[], Awaitable[NATS]],
    give_up: Callable[[NATS], Awaitable[None]],
) -> bool:
    """Whether `nc` still hears its subscription after `give_up` timed out on a frozen server."""
    nc, other = await connect(), await connect()
    heard = asyncio.Event()

    async def on_message(msg: Msg) -> None:
        heard.set()

    await nc.subscribe("t.flush", cb=on_message)
    await nc.flush()
    pid = nats_keeper.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(asyncio.TimeoutError):
            await give_up(nc)
    finally:
        os.kill(pid, signal.SIGCONT)
    await other.publish("t.flush", b"after")
    await other.flush()
    # Delivered at once when nc is reading; the bound only ends the wait when it is not.
    try:
        await asyncio.wait_for(heard.wait(), 3.0)
    except TimeoutError:
        return False
    return True


async def test_a_flush_given_up_on_leaves_the_connection_hearing(
    nats_keeper: ServerKeeper, connect: Callable[[], Awaitable[NATS]]
) -> None:
    assert await heard_after_a_late_pong(nats_keeper, connect, lambda nc: flush(nc, 0.3))


async def test_nats_py_own_flush_timeout_leaves_it_deaf_which_is_why(
    nats_keeper: ServerKeeper, connect: Callable[[], Awaitable[NATS]]
) -> None:
    # The defect nats_flush.py works around (nats-py 2.16.0). If this starts failing, nats-py
    # has fixed it and the module can go.
    assert not await heard_after_a_late_pong(nats_keeper, connect, lambda nc: nc.flush(timeout=1))
