"""A durable pull consumer's messages as they come, from one pull request kept open.

nats-py's `fetch` makes a pull request per call and the server ends it with a status
message as soon as it has delivered what there was. A reactor is mostly handed one event at
a time (a run's events come milliseconds apart, and it reacts to few of them), so each event
cost a pull request and a status message beside its delivery, and a wake of the puller for
each of the three (bench/run_inventory.py: the evolution service published 4.5 and was sent
4.6 messages a 1-step run, for 3 events; with TLS every one is a record to seal and open;
3.1 and 3.1 this way).

Here one request for up to `batch` messages stays open for `expires` seconds, and the server
delivers each event into it as it is appended. A new request is made when the open one has
delivered all it asked for, has ended (its expiry, or a status such as a leadership change),
or has been lost: a reconnection (a restarted server drops it without a word) asks again at
once, and a request whose end is overdue is taken as lost too. Messages are kept here as
they arrive, so whoever holds them can tell the server they are being worked on
(`waiting`), even those not taken yet.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from o_runtime.eventlog import EventLog

log = logging.getLogger(__name__)

# The status of a message that is an idle heartbeat of the request, not its end.
_HEARTBEAT = "100"
# The status that ends a request at its expiry: a new one is made at once.
_EXPIRED = "408"
# After a request lost, or ended by anything but its expiry (the consumer deleted, too
# many requests waiting), the next waits this long: a server refusing at once is not
# asked again in a tight loop.
PAUSE_AFTER_TROUBLE = 1.0
# How long past its expiry a request's end may be late before it is taken as lost.
OVERDUE = 1.0


class Deliveries:
    """What the server delivered on durable consumer `durable` of `stream`, taken in
    arrival order."""

    def __init__(
        self,
        eventlog: EventLog,
        stream: str,
        durable: str,
        batch: int,
        expires: float,
        api: str = "$JS.API",
    ) -> None:
        self.eventlog = eventlog
        self.nc = eventlog.nc
        self.batch = batch
        self.expires = expires
        self._next = f"{api}.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._arrived: list[Msg] = []
        self._came = asyncio.Event()
        # The open request: how many more messages it may deliver, and when it is overdue
        # (0: no request open).
        self._credit = 0
        self._overdue = 0.0
        self._not_before = 0.0
        self._inbox: Subscription | None = None

    async def start(self) -> None:
        self._inbox = await self.nc.subscribe(self.nc.new_inbox(), cb=self._arrive)
        self._reconnections = asyncio.create_task(self._on_reconnections())

    async def stop(self) -> None:
        self._reconnections.cancel()
        await asyncio.gather(self._reconnections, return_exceptions=True)
        if self._inbox is not None:
            await self._inbox.unsubscribe()

    async def _on_reconnections(self) -> None:
        while True:
            await self.eventlog.until_reconnected()
            self._credit = 0
            self._came.set()

    def waiting(self) -> list[Msg]:
        """Messages delivered and not taken yet."""
        return list(self._arrived)

    async def take(self, timeout: float) -> list[Msg]:
        """Every message delivered and not taken yet, in arrival order; when there is none,
        the first that comes within `timeout` (and any with it), or none."""
        deadline = time.monotonic() + timeout
        while not self._arrived:
            now = time.monotonic()
            if now >= deadline:
                return []
            if self._credit <= 0 or now >= self._overdue:
                if self._credit > 0:
                    log.warning("%s: a pull request's end is overdue; asking again", self._next)
                    self._not_before = now + PAUSE_AFTER_TROUBLE
                    self._credit = 0
                if now < self._not_before:
                    await self._wait(min(deadline, self._not_before) - now)
                    continue
                await self._request()
            await self._wait(min(deadline, self._overdue) - time.monotonic())
        taken, self._arrived = self._arrived, []
        return taken

    async def _wait(self, seconds: float) -> None:
        self._came.clear()
        if self._arrived or seconds <= 0:
            return
        try:
            await asyncio.wait_for(self._came.wait(), seconds)
        except TimeoutError:
            pass

    async def _request(self) -> None:
        assert self._inbox is not None, "start() first"
        request = {"batch": self.batch, "expires": int(self.expires * 1e9)}
        self._credit = self.batch
        self._overdue = time.monotonic() + self.expires + OVERDUE
        await self.nc.publish(self._next, json.dumps(request).encode(), self._inbox.subject)

    async def _arrive(self, msg: Msg) -> None:
        status = msg.headers.get("Status") if msg.headers else None
        if status is None:
            self._arrived.append(msg)
            self._credit -= 1
        elif status != _HEARTBEAT:
            # The request ended (a 409 Batch Completed may follow the last delivery).
            if status != _EXPIRED and self._credit > 0:
                log.info("%s: pull request ended: %s %s", self._next, status, msg.headers)
                self._not_before = time.monotonic() + PAUSE_AFTER_TROUBLE
            self._credit = 0
        self._came.set()
