"""What this process holds of a durable consumer, kept where its survivors can find it.

JetStream gives a message its holder never acknowledged to someone else only once the
consumer's ack_wait has passed since the holder last said it was working on it: seconds
(the executor's 5, the file worker's 30) for work a dead process will never finish. So each
process keeps, in the KV bucket `o_held` under `<consumer>.<incarnation>`, the ack subjects
of the messages it holds and where to ask whether it lives (o_runtime/liveness.py). A
replica that finds it gone, or its own restart, naks them (o_runtime/takeover.py) and
JetStream delivers them again at once.

Writes are coalesced: one put in flight per consumer, carrying the whole set as it is when
it goes, so a busy consumer writes far less than once per message. A take is written at
once (a death right after it is covered); a release rides along with the next write, or
goes on its own IDLE_WRITE later: an entry left for a message already acked is harmless,
because nats-server ignores a nak of a message no longer pending. A message the holder
naks itself (a deferred or failed command) is written out of its set first (`written`): a
nak names only the stream sequence, so a stale entry could nak the next delivery of that
message, held by another replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import msgpack
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.kv import KeyValue

from o_runtime.eventlog import EventLog
from o_runtime.kv_buckets import kept_bucket, opened
from o_runtime.liveness import Liveness, liveness

log = logging.getLogger(__name__)

HELD_BUCKET = "o_held"
# Every key of the bucket goes this long after its last write: a dead holder's (its delete
# marker, once taken over) and an idle one's; a holder writes its set again before that.
KEY_MAX_AGE = 3600.0
REFRESH_EVERY = 600.0
# A release alone is written this long after it, unless a take or a nak writes it sooner.
IDLE_WRITE = 1.0
# A write that failed (NATS away) is tried again after this.
RETRY_WRITE = 0.5
# How long a holder waits for its set to be written before a nak of its own.
WRITE_TIMEOUT = 2.0


@dataclass(frozen=True)
class Held:
    """One holder's entry: its liveness subject and the ack subjects of what it holds."""

    alive: str
    replies: tuple[str, ...]

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb({"alive": self.alive, "held": list(self.replies)})
        return packed

    @classmethod
    def decode(cls, data: bytes) -> Held:
        """Raises ValueError on anything but an entry."""
        try:
            value = msgpack.unpackb(data, raw=False)
            alive, held = value["alive"], value["held"]
        except Exception as exc:
            raise ValueError(f"not a holdings entry: {exc}") from None
        if not isinstance(alive, str) or not all(isinstance(r, str) for r in held):
            raise ValueError("not a holdings entry")
        return cls(alive, tuple(held))


def bucket_config(replicas: int = 1) -> KeyValueConfig:
    return kept_bucket(HELD_BUCKET, KEY_MAX_AGE, replicas)


async def held_bucket(js: JetStreamContext, replicas: int = 1) -> KeyValue:
    return await opened(js, bucket_config(replicas))


def ack_position(reply: str) -> tuple[int, int] | None:
    """(stream sequence, delivery count) of a JetStream ack subject; None if it is not one.

    `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>`,
    or with a domain and an account hash after `$JS.ACK` (nats-server 2.10+ may send either).
    """
    tokens = reply.split(".")
    if tokens[:2] != ["$JS", "ACK"]:
        return None
    at = 4 if len(tokens) == 9 else 6 if len(tokens) >= 11 else None
    if at is None:
        return None
    try:
        return int(tokens[at + 1]), int(tokens[at])
    except ValueError:
        return None


def to_give_back(dead: Held, others: Iterable[Held]) -> list[str]:
    """The ack subjects of a dead holder's messages to nak: all but those another holder
    lists with the same or a later delivery (the message went on to it: a nak, which names
    only the stream sequence, would take it from that one)."""
    latest: dict[int, int] = {}
    for held in others:
        for reply in held.replies:
            position = ack_position(reply)
            if position is not None:
                seq, delivered = position
                latest[seq] = max(latest.get(seq, 0), delivered)
    out = []
    for reply in dead.replies:
        position = ack_position(reply)
        if position is None:
            continue
        seq, delivered = position
        if latest.get(seq, 0) < delivered:
            out.append(reply)
    return out


class Holdings:
    """This process's held messages of one consumer, written to the bucket as they change."""

    def __init__(self, kv: KeyValue, consumer: str, alive: Liveness) -> None:
        self.kv = kv
        self.consumer = consumer
        self.key = f"{consumer}.{alive.incarnation}"
        self.alive = alive.subject
        # Ack subjects, in the order taken.
        self._replies: dict[str, None] = {}
        self._changes = 0
        self._written = 0
        # The changes the write in flight carries (a wait for those needs no other write).
        self._writing = 0
        self._pending = asyncio.Event()
        self._now = asyncio.Event()
        self._wrote = asyncio.Condition()
        self._writer: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, eventlog: EventLog, consumer: str) -> Holdings:
        alive = await liveness(eventlog)
        kv = await held_bucket(eventlog.js, eventlog.replicas)
        holdings = cls(kv, consumer, alive)
        holdings._writer = asyncio.create_task(holdings._write(), name=f"holdings {consumer}")
        return holdings

    @property
    def replies(self) -> tuple[str, ...]:
        return tuple(self._replies)

    def hold(self, reply: str) -> None:
        """A message taken: written at once."""
        self._replies[reply] = None
        self._changed(now=True)

    def release(self, reply: str) -> None:
        """A message acked (or given up): written with the next write."""
        if reply in self._replies:
            del self._replies[reply]
            self._changed(now=False)

    async def written(self, timeout: float = WRITE_TIMEOUT) -> bool:
        """Write what changed now, and wait for it (False if that took over `timeout`)."""
        target = self._changes
        if self._written >= target:
            return True
        if self._writing < target:
            # (Not when the write in flight carries them: a later release would then go at
            # once instead of riding with the next take, a second write per command.)
            self._now.set()
        try:
            async with asyncio.timeout(timeout), self._wrote:
                await self._wrote.wait_for(lambda: self._written >= target)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Stop writing, and remove the entry (a clean stop gives everything back first)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.kv.delete(self.key), WRITE_TIMEOUT)

    def _changed(self, now: bool) -> None:
        self._changes += 1
        self._pending.set()
        if now:
            self._now.set()

    async def _write(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._pending.wait(), REFRESH_EVERY)
            if not self._pending.is_set() and not self._replies:
                continue  # nothing held, nothing to keep from expiring
            if not self._now.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._now.wait(), IDLE_WRITE)
            self._pending.clear()
            self._now.clear()
            target = self._writing = self._changes
            entry = Held(self.alive, tuple(self._replies))
            try:
                await self.kv.put(self.key, entry.encode())
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s: holdings not written (%r); trying again", self.consumer, exc)
                self._writing = self._written
                self._pending.set()
                self._now.set()
                await asyncio.sleep(RETRY_WRITE)
                continue
            async with self._wrote:
                self._written = target
                self._wrote.notify_all()
