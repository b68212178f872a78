"""A flush given up on leaves the connection hearing (o_runtime/nats_flush.py), on a real
nats-server frozen by SIGSTOP: its connections stay open, its PONG comes late."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from o_devtools.supervisor import ServerKeeper
from o_runtime.nats_flush import flush
from tests.integration.conftest import server_operator


def wait_stopped(pid: int) -> None:
    """Until the kernel has stopped `pid`: a signal is delivered, not obeyed at once."""
    deadline = time.monotonic() + 5.0
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, "not stopped"
        time.sleep(0.001)


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


async def test_a_flush_given_up_on_leaves_the_connection_hearing(
    nats_keeper: ServerKeeper, connect: Callable[[], Awaitable[NATS]]
) -> None:
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
        wait_stopped(pid)  # before the flush's PING goes out
        with pytest.raises(asyncio.TimeoutError):
            await flush(nc, 0.3)
    finally:
        os.kill(pid, signal.SIGCONT)
    # Twice: the late PONG and the first message can come in one read, the message first
    # (heard before the PONG breaks the read loop); the second comes after the PONG.
    for body in (b"after", b"again"):
        heard.clear()
        await other.publish("t.flush", body)
        await other.flush()
        # Delivered at once when nc is reading; the bound only ends the wait when it is not.
        await asyncio.wait_for(heard.wait(), 3.0)
