"""Event reactors: a durable consumer of the events stream that acts on some events.

A projection keeps a read model; a reactor decides something new when an event
happens (the evolution service counting a sleep-time turn when a run ends). It
reads the events stream through its own durable pull consumer, created to
deliver only events appended from then on (a reactor deployed on an old log
does not react to its history). Events are handled one at a time in log order
(a reaction is a decision of a few milliseconds). A handler that fails is tried
again in place with backoff; after MAX_DELIVERIES it is dead-lettered, so one
bad event never stops the rest. Handlers must be idempotent: a crash between
their effect and the ack delivers the event again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from o_contracts import subjects
from o_contracts.base import Message
from o_contracts.envelope import MalformedMessage, decode, known_type
from o_runtime.commands import MAX_DELIVERIES, bind_durable, pulled, retry_delay
from o_runtime.dead_letters import dead_letter
from o_runtime.eventlog import EventLog, Recorded
from o_runtime.outages import is_outage

log = logging.getLogger(__name__)

# A reaction gets the events of its types from one batch, in log order.
Reaction = Callable[[list[Recorded]], Awaitable[None]]
# Up to this many events are pulled at once (most concern no reaction).
BATCH = 256
# After a batch that was not full the reactor waits this long before pulling again, so
# that events arriving one by one are pulled (and acked) together: one pull and one ack
# per pause instead of per event. A reaction comes at most this much later.
GATHER = 0.01


def reactor_config(ack_wait: float = 30.0) -> ConsumerConfig:
    """A reactor's consumer on the server: from the events appended after it was made."""
    return ConsumerConfig(
        ack_policy=AckPolicy.ALL, ack_wait=ack_wait, deliver_policy=DeliverPolicy.NEW
    )


class EventReactor:
    def __init__(
        self,
        eventlog: EventLog,
        name: str,
        filter_subject: str,
        handlers: dict[type[Message], Reaction],
        *,
        ack_wait: float = 30.0,
    ) -> None:
        self.eventlog = eventlog
        self.name = name
        self.filter_subject = filter_subject
        self.handlers = {cls.type_name(): fn for cls, fn in handlers.items()}
        self.ack_wait = ack_wait

    async def start(self) -> None:
        # Acks are cumulative (AckPolicy.ALL): a batch is acked once, at its last event,
        # after every event in it was handled in order. Most events concern no reactor;
        # one ack per event cost the agent loop a measurable share of the machine.
        # The durable is made by the setup role (o_setup/topology.py).
        self._sub = await bind_durable(
            self.eventlog,
            self.filter_subject,
            subjects.EVENTS_STREAM,
            self.name,
            reactor_config(self.ack_wait),
        )
        self._pulling = asyncio.create_task(self._pull(), name=f"reactor {self.name}")

    async def stop(self) -> None:
        self._pulling.cancel()
        await asyncio.gather(self._pulling, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()

    async def _pull(self) -> None:
        while True:
            msgs = await pulled(self._sub, BATCH, self.name)
            if not msgs:
                continue
            by_type: dict[str, list[tuple[Recorded, bytes]]] = {}
            for msg in msgs:
                name = known_type(msg.data)
                if name not in self.handlers:
                    continue
                with contextlib.suppress(MalformedMessage):
                    # (Not an event anyone could have appended: projections refuse it too.)
                    record = Recorded(msg.metadata.sequence.stream, msg.subject, decode(msg.data))
                    by_type.setdefault(name, []).append((record, msg.data))
            for name, events in by_type.items():
                await self._handle(self.handlers[name], events, msgs[-1])
            await msgs[-1].ack()
            if len(msgs) < BATCH:
                await asyncio.sleep(GATHER)

    async def _handle(
        self, handler: Reaction, events: list[tuple[Recorded, bytes]], last: Msg
    ) -> None:
        """Handle the events, trying again in place until done or dead-lettered (acking
        a later event would ack these too)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                await handler([record for record, _ in events])
                return
            except Exception as exc:
                if is_outage(exc):
                    log.warning("%s: reacting met an outage (%r); will retry", self.name, exc)
                    await asyncio.sleep(retry_delay(attempt, outage=True))
                    continue
                if attempt >= MAX_DELIVERIES:
                    for record, raw in events:
                        await dead_letter(
                            self.eventlog.js,
                            self.name,
                            raw,
                            f"failed {MAX_DELIVERIES} times: {exc!r}",
                            origin_subject=record.subject,
                            origin_seq=record.seq,
                        )
                    return
                log.exception(
                    "%s: reacting to %d events failed; will retry", self.name, len(events)
                )
                await asyncio.sleep(retry_delay(attempt, outage=False))
                # A long retry keeps the batch from being delivered again meanwhile.
                await last.in_progress()
