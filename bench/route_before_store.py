"""How often a waiter that listens, then looks, misses a message both ways.

`python -m bench.route_before_store [--tries N]`. JetStream routes a message to core
subscribers first and stores it afterwards (the stream takes it from a queue of its own), so
a message routed just before a subscriber's SUB reaches the server can be stored just after
the subscriber's look: neither heard nor seen. Each try subscribes and looks (the subject's
last sequence, a direct get, as `EventLog.last_seq`) while another connection appends to the
stream, then counts a miss if the message was neither heard nor seen. Why every wait for
the log also looks again after a pause (o_runtime/log_news.py).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from o_contracts import subjects
from o_devtools.embedded import EmbeddedNats
from o_runtime.eventlog import EventLog, ensure_streams

SUBJECT = subjects.agent_subject("agent-route-before-store")


async def one_try(publisher: EventLog, waiter: EventLog, i: int) -> bool:
    """True if the waiter neither heard nor saw the message appended as it subscribed."""
    appending = asyncio.create_task(
        publisher.js.publish(SUBJECT, b"%d" % i, stream=subjects.EVENTS_STREAM)
    )
    sub = await waiter.nc.subscribe(SUBJECT)  # (no callback: queued as read)
    seen = await waiter.last_seq(SUBJECT)
    appended = (await appending).seq
    # Whatever was routed to the waiter before this round trip is queued by its end.
    await waiter.nc.flush()
    heard = sub.pending_msgs > 0
    await sub.unsubscribe()
    return not heard and seen < appended


async def main(tries: int) -> None:
    with tempfile.TemporaryDirectory(prefix="o-route-") as tmp:
        server = EmbeddedNats(Path(tmp), auth=False)
        server.start()
        try:
            publisher = await EventLog.connect(server.url, name="publisher")
            waiter = await EventLog.connect(server.url, name="waiter")
            await ensure_streams(publisher.js)
            missed = sum([await one_try(publisher, waiter, i) for i in range(tries)])
            await publisher.close()
            await waiter.close()
        finally:
            server.stop()
    print(f"{tries} tries: {missed} messages neither heard nor seen ({missed / tries:.1%})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=3000)
    asyncio.run(main(parser.parse_args().tries))
