"""A process of its own holding commands of a durable consumer, for test_takeover.py.

    python -m tests.integration.command_holder NATS_URL CONSUMER HOLD_SECONDS

It prints `ready` once it consumes, then `holding <stream seq>` each time its handler gets a
command, which it works on for HOLD_SECONDS before answering `{"by": "holder"}`. SIGTERM
stops it cleanly (what it holds is given back); SIGKILL is a death.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

from o_contracts.base import Reply
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_runtime.commands import CommandConsumer, Delivery
from o_runtime.eventlog import EventLog


async def main(url: str, name: str, hold: float) -> None:
    eventlog = await EventLog.connect(url, name="holder")

    async def handler(envelope: Envelope[Any], delivery: Delivery) -> Reply:
        print(f"holding {delivery.stream_seq}", flush=True)
        await asyncio.sleep(hold)
        return Reply(ok=True, result={"by": "holder"})

    consumer = CommandConsumer(eventlog, name, f"o.cmd.{name}.>", {StartRun: handler}, ack_wait=30)
    await consumer.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    await consumer.stop()
    await eventlog.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
