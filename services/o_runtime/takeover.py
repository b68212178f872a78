"""Messages held by a process that died, given back to their consumer at once.

Every process consuming a durable keeps what it holds in the `o_held` bucket
(o_runtime/holdings.py). Each one also follows the entries of its consumer's other holders:
it hears every write on core NATS (`$KV.o_held.<consumer>.*`, as the run queue hears its
cursors), reads the whole bucket at start and again now and then (a write missed while it
was disconnected), and asks each holder of something, every PROBE_EVERY, whether it still
lives (o_runtime/liveness.py).

A holder found gone (no responders, twice) is taken over: its entry is deleted with
compare-and-swap on its revision (so of several replicas, or a replica and the holder's own
restart, exactly one goes on; and a holder that wrote meanwhile is alive after all), then
each message it held is nakked, and JetStream delivers it again at once to whichever
replica pulls next. The handlers were built for redelivery (every write is found in the log
before it is made again: docs/architecture.md), so a run resumed this way does no recorded
step twice.

A holder that only stopped answering (stalled: a GC pause, a starved CPU) is never taken
over here: silence is not death. Nor is any holder for RECONNECT_GRACE after this process's
own connection came back: a nats-server restart drops everyone's subscriptions at once, and
the holders are reconnecting too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from o_runtime.eventlog import EventLog
from o_runtime.holdings import HELD_BUCKET, Held, Holdings, to_give_back
from o_runtime.instruments import measured
from o_runtime.liveness import Verdict, checked
from o_runtime.nats_flush import FLUSH_WITHIN, flush

log = logging.getLogger(__name__)

# How often the holders of something are asked whether they live.
PROBE_EVERY = 0.1
# How often the bucket is read whole (writes heard on core NATS are the usual way).
RESCAN_EVERY = 30.0
# After this process's own reconnection, how long no holder is taken for dead.
RECONNECT_GRACE = 2.0
KV_OPERATION = "KV-Operation"


class Takeover:
    """Follows one consumer's holders; naks what a dead one held."""

    def __init__(self, eventlog: EventLog, kv: KeyValue, own: Holdings) -> None:
        self.eventlog = eventlog
        self.kv = kv
        self.own = own
        self.consumer = own.consumer
        self.prefix = f"$KV.{HELD_BUCKET}.{self.consumer}."
        # Every holder's entry as last heard or read, by key.
        self.holders: dict[str, Held] = {}
        # Keys heard since the last full read began (what it read of them may be older).
        self._heard: set[str] = set()
        self._asking: dict[str, asyncio.Task[None]] = {}
        self._reconnected_at = float("-inf")
        self._sub: Subscription | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        # Listen first, then read: a write between the two is heard.
        self._sub = await self.eventlog.nc.subscribe(f"{self.prefix}*", cb=self._on_write)
        await self.rescan()
        self._tasks = [
            asyncio.create_task(self._ask_holders(), name=f"takeover {self.consumer}"),
            asyncio.create_task(self._rescans(), name=f"takeover rescans {self.consumer}"),
        ]

    async def stop(self) -> None:
        for task in [*self._tasks, *self._asking.values()]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._asking.values(), return_exceptions=True)
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()

    async def _on_write(self, msg: Msg) -> None:
        key = msg.subject.removeprefix(f"$KV.{HELD_BUCKET}.")
        self._heard.add(key)
        if (msg.headers or {}).get(KV_OPERATION) in ("DEL", "PURGE"):
            self.holders.pop(key, None)
            return
        try:
            self.holders[key] = Held.decode(msg.data)
        except ValueError:
            self.holders.pop(key, None)

    async def rescan(self) -> None:
        """Read every entry of the consumer's holders (deleted ones drop out)."""
        self._heard.clear()
        info = await self.eventlog.js.stream_info(
            f"KV_{HELD_BUCKET}", subjects_filter=f"{self.prefix}*"
        )
        keys = [s.removeprefix(f"$KV.{HELD_BUCKET}.") for s in (info.state.subjects or {})]
        read: dict[str, Held] = {}
        for key in keys:
            held = await self._read(key)
            if held is not None:
                read[key] = held
        for key in set(self.holders) | set(read):
            if key in self._heard:
                continue  # what was heard is newer than what was read
            if key in read:
                self.holders[key] = read[key]
            else:
                self.holders.pop(key, None)

    async def _read(self, key: str) -> Held | None:
        try:
            entry = await self.kv.get(key)
        except KeyNotFoundError:  # (deleted keys too)
            return None
        try:
            return Held.decode(entry.value or b"")
        except ValueError:
            return None

    async def _rescans(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            reconnected = asyncio.ensure_future(self.eventlog.until_reconnected())
            try:
                await asyncio.wait_for(asyncio.shield(reconnected), RESCAN_EVERY)
                self._reconnected_at = loop.time()
            except TimeoutError:
                reconnected.cancel()
            try:
                await self.rescan()
            except Exception as exc:
                log.debug("%s: holdings not read (%r)", self.consumer, exc)

    async def _ask_holders(self) -> None:
        while True:
            for key, held in list(self.holders.items()):
                if key == self.own.key or not held.replies or key in self._asking:
                    continue
                task = asyncio.create_task(self._ask(key, held))
                self._asking[key] = task
                task.add_done_callback(functools.partial(self._asked, key))
            await asyncio.sleep(PROBE_EVERY)

    def _asked(self, key: str, _: asyncio.Task[None]) -> None:
        self._asking.pop(key, None)

    async def _ask(self, key: str, held: Held) -> None:
        try:
            verdict = await checked(self.eventlog.nc, held.alive)
            loop = asyncio.get_running_loop()
            if verdict is Verdict.GONE and loop.time() - self._reconnected_at > RECONNECT_GRACE:
                await self.take_over(key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s: taking over %s failed (%r)", self.consumer, key, exc)

    async def take_over(self, key: str) -> int:
        """Delete a dead holder's entry (if no one did first) and nak what it held: the
        number of messages given back."""
        try:
            entry = await self.kv.get(key)
        except KeyNotFoundError:
            self.holders.pop(key, None)
            return 0
        try:
            held = Held.decode(entry.value or b"")
        except ValueError:
            held = Held("", ())
        try:
            await self.kv.delete(key, last=entry.revision)
        except Exception as exc:
            # Another replica took it over first, or the holder wrote again: it lives.
            log.debug("%s: %s not taken over (%r)", self.consumer, key, exc)
            return 0
        self.holders.pop(key, None)
        others = [h for k, h in self.holders.items() if k != key]
        others.append(Held(self.own.alive, self.own.replies))
        replies = to_give_back(held, others)
        for reply in replies:
            await self.eventlog.nc.publish(reply, b"-NAK")
        await flush(self.eventlog.nc, FLUSH_WITHIN)
        if replies:
            measured.commands_taken_over.add(len(replies), {"consumer": self.consumer})
            log.warning(
                "%s: %s is gone; %d message(s) it held given back", self.consumer, key, len(replies)
            )
        return len(replies)
