"""A command held by a process that dies is handled again within a second, by a live replica
or by the dead one's restart, though the consumer's ack_wait is 30 s; a holder that only
stalls keeps its command; one that stops cleanly gives it back at once
(o_runtime/holdings.py, takeover.py). Real NATS; the holder is a process of its own."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from o_contracts import subjects
from o_contracts.base import Reply
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_runtime import holdings as holdings_module
from o_runtime.commands import CommandConsumer, Delivery, send_and_wait
from o_runtime.eventlog import EventLog
from o_runtime.holdings import HELD_BUCKET, Held
from o_runtime.liveness import PROBE_TIMEOUT
from tests.integration.commands_support import command
from tests.servers import Servers

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 20.0


class Holder:
    """The holder process and what it printed."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def said(self) -> str:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), DEADLINE)
        return line.decode().strip()


@pytest.fixture
async def consumer_name(eventlog: EventLog) -> AsyncIterator[str]:
    name = f"takeover_{uuid.uuid4().hex[:8]}"
    yield name
    await eventlog.js.delete_consumer(subjects.COMMANDS_STREAM, name)


async def holder(servers: Servers, name: str, hold: float) -> Holder:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("contracts", "services", ".")),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.integration.command_holder",
        servers.nats_url,
        name,
        str(hold),
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    held = Holder(proc)
    assert await held.said() == "ready"
    return held


class Survivor:
    """A consumer in this process on the same durable: when and how it got the command."""

    def __init__(self, eventlog: EventLog, name: str) -> None:
        self.deliveries: list[int] = []
        self.at: list[float] = []
        self.consumer = CommandConsumer(
            eventlog, name, f"o.cmd.{name}.>", {StartRun: self.handle}, ack_wait=30
        )

    async def handle(self, envelope: Envelope[Any], delivery: Delivery) -> Reply:
        self.at.append(asyncio.get_running_loop().time())
        self.deliveries.append(delivery.num_delivered)
        return Reply(ok=True, result={"by": "survivor"})


async def held_by_a_process(
    eventlog: EventLog, servers: Servers, name: str, hold: float
) -> tuple[Holder, asyncio.Task[Reply]]:
    """A command sent, and the holder process's word that it works on it."""
    proc = await holder(servers, name, hold)
    c = command()
    waiting = asyncio.create_task(
        send_and_wait(eventlog, f"o.cmd.{name}.{c.aggregate_id}", c, timeout=DEADLINE)
    )
    assert (await proc.said()).startswith("holding ")
    return proc, waiting


@pytest.mark.parametrize("by", ["a live replica", "the restarted process"])
async def test_a_command_held_by_a_killed_process_is_handled_again_within_a_second(
    eventlog: EventLog, servers: Servers, consumer_name: str, by: str
) -> None:
    proc, waiting = await held_by_a_process(eventlog, servers, consumer_name, hold=60)
    survivor = Survivor(eventlog, consumer_name)
    restart = by == "the restarted process"
    if not restart:
        await survivor.consumer.start()
    try:
        killed_at = asyncio.get_running_loop().time()
        proc.proc.kill()
        await proc.proc.wait()
        if restart:
            await survivor.consumer.start()
        reply = await waiting
    finally:
        await survivor.consumer.stop()
    assert reply.ok and reply.result == {"by": "survivor"}
    # The second delivery, given back long before the consumer's 30 s ack_wait: within a
    # second of the death, and a probe's timeout (the kill here often comes as the survivor's
    # first probe is on its way: the dying holder never answers it, and only the next probe
    # finds no responders).
    assert survivor.deliveries == [2]
    assert survivor.at[0] - killed_at < 1.0 + PROBE_TIMEOUT


async def test_a_stalled_holder_keeps_its_command(
    eventlog: EventLog, servers: Servers, consumer_name: str
) -> None:
    proc, waiting = await held_by_a_process(eventlog, servers, consumer_name, hold=2.0)
    survivor = Survivor(eventlog, consumer_name)
    await survivor.consumer.start()
    try:
        # Frozen (as by a long GC pause or a starved CPU) for many of the survivor's
        # liveness questions: its connection is still there, so it is not taken for dead.
        proc.proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(1.5)
        proc.proc.send_signal(signal.SIGCONT)
        reply = await waiting
    finally:
        await survivor.consumer.stop()
        proc.proc.terminate()
        await proc.proc.wait()
    assert reply.ok and reply.result == {"by": "holder"}
    assert survivor.deliveries == []


async def test_a_holder_that_stops_cleanly_gives_its_command_back_at_once(
    eventlog: EventLog, servers: Servers, consumer_name: str
) -> None:
    proc, waiting = await held_by_a_process(eventlog, servers, consumer_name, hold=60)
    survivor = Survivor(eventlog, consumer_name)
    await survivor.consumer.start()
    try:
        stopped_at = asyncio.get_running_loop().time()
        proc.proc.terminate()
        assert await proc.proc.wait() == 0
        reply = await waiting
    finally:
        await survivor.consumer.stop()
    assert reply.ok and reply.result == {"by": "survivor"}
    assert survivor.deliveries == [2]
    assert survivor.at[0] - stopped_at < 1.0


async def test_holdings_are_written_once_per_command_when_commands_follow_each_other(
    eventlog: EventLog, consumer_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A take is written at once; the release after the ack rides with the next take (or
    # goes alone IDLE_WRITE later, here longer than the test): one write per command. A
    # handler waiting for its take's write while that write was in flight had the release
    # written at once too: two writes per command, each a message and its ack over NATS.
    monkeypatch.setattr(holdings_module, "IDLE_WRITE", 60.0)
    one = Survivor(eventlog, consumer_name)
    await one.consumer.start()
    # (The writes come from this connection: each is heard here, in order, before the
    # answer to a flush.)
    puts = await eventlog.nc.subscribe(f"$KV.{HELD_BUCKET}.{one.consumer.holdings.key}")
    acks = await eventlog.nc.subscribe(f"$JS.ACK.{subjects.COMMANDS_STREAM}.{consumer_name}.>")
    try:
        for _ in range(3):
            c = command()
            subject = f"o.cmd.{consumer_name}.{c.aggregate_id}"
            assert (await send_and_wait(eventlog, subject, c, timeout=DEADLINE)).ok
            # Its ack heard: released (the release follows the ack's publish at once).
            await acks.next_msg(timeout=DEADLINE)
        await eventlog.nc.flush()
        written = puts.pending_msgs
    finally:
        for sub in (puts, acks):
            await sub.unsubscribe()
        await one.consumer.stop()
    assert written == 3


async def test_a_handler_that_reads_first_is_on_record_once_its_holding_is_written(
    eventlog: EventLog, consumer_name: str
) -> None:
    # reads_before_held (the executor's): the handler starts at once, its reads overlapping
    # the take's write, and awaits delivery.held() before any effect; from then on the
    # bucket names the message, so a survivor would find it.
    seen: list[tuple[bool, tuple[str, ...]]] = []

    async def handle(envelope: Envelope[Any], delivery: Delivery) -> Reply:
        on_record = await delivery.held()
        entry = await consumer.holdings.kv.get(consumer.holdings.key)
        seen.append((on_record, Held.decode(entry.value or b"").replies))
        return Reply(ok=True)

    consumer = CommandConsumer(
        eventlog,
        consumer_name,
        f"o.cmd.{consumer_name}.>",
        {StartRun: handle},
        ack_wait=30,
        reads_before_held=True,
    )
    await consumer.start()
    try:
        c = command()
        subject = f"o.cmd.{consumer_name}.{c.aggregate_id}"
        assert (await send_and_wait(eventlog, subject, c, timeout=DEADLINE)).ok
    finally:
        await consumer.stop()
    ((on_record, replies),) = seen
    assert on_record and len(replies) == 1 and replies[0].startswith("$JS.ACK.")
