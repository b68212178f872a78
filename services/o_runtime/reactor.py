"""Event reactors: a durable consumer of the events stream that acts on some events.

A projection keeps a read model; a reactor decides something new when an event
happens (the evolution service counting a sleep-time turn when a run ends). It
reads the events stream through its own durable pull consumer, created to
deliver only events appended from then on (a reactor deployed on an old log
does not react to its history). Events of one key (the agent, by default)
are handled one at a time in log order; others in parallel. A handler that
fails is tried again (nak with backoff); after MAX_DELIVERIES it is
dead-lettered, so one bad event never stops the rest. Handlers must be
idempotent: a crash between their effect and the ack delivers the event again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from o_contracts import subjects
from o_contracts.base import Message
from o_contracts.envelope import MalformedMessage, decode, known_type
from o_runtime.commands import MAX_DELIVERIES, OUTAGE_FIRST_RETRY, OUTAGE_RETRY_DELAY, PULL_EXPIRES
from o_runtime.dead_letters import dead_letter
from o_runtime.eventlog import EventLog, Recorded
from o_runtime.outages import is_outage

log = logging.getLogger(__name__)

Reaction = Callable[[Recorded], Awaitable[None]]
# Up to this many events are pulled at once (most are not handled and are acked at once).
BATCH = 64


def agent_of(subject: str) -> str:
    """The key of an event on `o.evt.agent.<id>[.conv.<conv>]`: the agent."""
    parts = subject.split(".")
    return parts[3] if len(parts) > 3 else subject


class EventReactor:
    def __init__(
        self,
        eventlog: EventLog,
        name: str,
        filter_subject: str,
        handlers: dict[type[Message], Reaction],
        *,
        key: Callable[[str], str] = agent_of,
        ack_wait: float = 30.0,
        concurrency: int = 16,
    ) -> None:
        self.eventlog = eventlog
        self.name = name
        self.filter_subject = filter_subject
        self.handlers = {cls.type_name(): fn for cls, fn in handlers.items()}
        self.key = key
        self.ack_wait = ack_wait
        self.concurrency = concurrency
        # One lock per key with events in hand, and how many hold or wait for it
        # (the lock is forgotten when none do, so the map stays small).
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._sub = await self.eventlog.js.pull_subscribe(
            self.filter_subject,
            durable=self.name,
            stream=subjects.EVENTS_STREAM,
            config=ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=self.ack_wait,
                deliver_policy=DeliverPolicy.NEW,
                max_ack_pending=BATCH * 4,
            ),
        )
        self._slots = asyncio.Semaphore(self.concurrency)
        self._pulling = asyncio.create_task(self._pull(), name=f"reactor {self.name}")

    async def stop(self) -> None:
        tasks = [self._pulling, *self._tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()

    async def _pull(self) -> None:
        while True:
            try:
                msgs = await self._sub.fetch(BATCH, timeout=PULL_EXPIRES)
            except asyncio.CancelledError:
                raise
            except NatsTimeoutError:
                continue
            except Exception:
                log.warning("%s: pulling events failed; trying again", self.name, exc_info=True)
                await asyncio.sleep(1.0)
                continue
            for msg in msgs:
                if known_type(msg.data) not in self.handlers:
                    await msg.ack()
                    continue
                await self._slots.acquire()
                task = asyncio.create_task(self._handle(msg))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                task.add_done_callback(lambda _: self._slots.release())

    async def _handle(self, msg: Msg) -> None:
        meta = msg.metadata
        key = self.key(msg.subject)
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                envelope = decode(msg.data)
                await self.handlers[envelope.type](
                    Recorded(meta.sequence.stream, msg.subject, envelope)
                )
        except MalformedMessage:
            # Not an event anyone could have appended (projections refuse it too).
            await msg.ack()
            return
        except Exception as exc:
            await self._failed(msg, exc)
            return
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
        await msg.ack()

    async def _failed(self, msg: Msg, exc: Exception) -> None:
        meta = msg.metadata
        if is_outage(exc):
            log.warning("%s: reacting met an outage (%r); will retry", self.name, exc)
            delay = OUTAGE_FIRST_RETRY * 2.0 ** min(meta.num_delivered - 1, 10)
            await msg.nak(delay=min(delay, OUTAGE_RETRY_DELAY))
        elif meta.num_delivered >= MAX_DELIVERIES:
            reason = f"failed {MAX_DELIVERIES} times: {exc!r}"
            await dead_letter(
                self.eventlog.js,
                self.name,
                msg.data,
                reason,
                origin_subject=msg.subject,
                origin_seq=meta.sequence.stream,
            )
            await msg.ack()
        else:
            log.exception(
                "%s: reacting to event %d failed; will retry", self.name, meta.sequence.stream
            )
            await msg.nak(delay=min(2.0**meta.num_delivered, 30.0))
