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

Events held by a reactor that dies come back after ACK_WAIT (5 s), to a replica or to the
process's own restart; while a batch is being reacted to, the reactor tells the server it is
still at work (`in_progress`) every ACK_WAIT/3, so a slow reaction is not delivered again
under it. Reactors keep no holdings (o_runtime/holdings.py: a KV write per batch, which
command consumers pay to be given back at once): they pull every few milliseconds on a busy
system, beside every run, and a reaction late by a few seconds after a crash costs no one a
wait (a sleep-time turn, an archived decision, a file's processing started).

Each event is acked on its own, once its reaction is done (AckPolicy.EXPLICIT).
Cumulative acks (AckPolicy.ALL) lost events: an ack of event N also acks every
earlier event still held by another replica, or by a process that died while
reacting, so those were never delivered again (tests/integration/test_reactor.py).
Per-event acks cost ~4 us of the reactor's CPU and ~2 us of nats-server's per event
(5,000 ignored events, paired runs, 2026-11-24), beside ~37 us the reactor spends
pulling and typing each event either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy
from nats.js.errors import NotFoundError

from o_contracts import subjects
from o_contracts.base import Message
from o_contracts.envelope import MalformedMessage, decode, known_type
from o_runtime.commands import MAX_DELIVERIES, bind_durable, pulled
from o_runtime.dead_letters import dead_letter
from o_runtime.eventlog import EventLog, Recorded
from o_runtime.outages import is_outage
from o_runtime.retries import Retries
from o_runtime.tracing import reacting

log = logging.getLogger(__name__)

# A reaction gets the events of its types from one batch, in log order.
Reaction = Callable[[list[Recorded]], Awaitable[None]]
# Up to this many events are pulled at once (most concern no reaction).
BATCH = 256
# After a batch that was not full the reactor waits this long before pulling again, so
# that events arriving one by one are pulled together: one pull per pause instead of per
# event. A reaction comes at most this much later.
GATHER = 0.01
# How long the server waits for an event's ack (or a heartbeat) before delivering it again.
# The setup role makes every reactor's consumer with it (o_setup/topology.py); a reactor
# heartbeats at the server's own value.
ACK_WAIT = 5.0


async def _settled(send: Callable[[], Awaitable[None]]) -> None:
    """Ack (or say in progress); one that cannot be sent only means the event comes
    again, which idempotent handlers allow, so it must not stop the reactor."""
    try:
        await send()
    except Exception:
        log.warning("an ack could not be sent; the event will come again", exc_info=True)


def reactor_config(
    name: str,
    filter_subject: str,
    ack_wait: float = ACK_WAIT,
    deliver: DeliverPolicy = DeliverPolicy.NEW,
    start_seq: int | None = None,
) -> ConsumerConfig:
    """A reactor's consumer on the server: from the events appended after it was made,
    each acked on its own (its durable is made by the setup role: o_setup/topology.py)."""
    return ConsumerConfig(
        durable_name=name,
        filter_subject=filter_subject,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        deliver_policy=deliver,
        opt_start_seq=start_seq,
    )


async def replace_cumulative_consumer(
    js: JetStreamContext, name: str, filter_subject: str, ack_wait: float = ACK_WAIT
) -> None:
    """A consumer made with cumulative acks (before per-event acks; NATS cannot change
    an ack policy in place) is replaced by one starting after its last acked event:
    what was acked is not reacted to again, what was not is not skipped.

    The setup role does it (o_setup/topology.py): services may not delete consumers."""
    try:
        info: ConsumerInfo = await js.consumer_info(subjects.EVENTS_STREAM, name)
    except NotFoundError:
        return
    if info.config.ack_policy != AckPolicy.ALL:
        return
    floor = info.ack_floor.stream_seq if info.ack_floor else 0
    log.warning(
        "%s: replacing a consumer with cumulative acks; reactions resume after event %d",
        name,
        floor,
    )
    await js.delete_consumer(subjects.EVENTS_STREAM, name)
    with contextlib.suppress(Exception):
        # (Another setup run replacing it at the same moment made the same one.)
        await js.add_consumer(
            subjects.EVENTS_STREAM,
            reactor_config(
                name, filter_subject, ack_wait, DeliverPolicy.BY_START_SEQUENCE, floor + 1
            ),
        )


class EventReactor:
    def __init__(
        self,
        eventlog: EventLog,
        name: str,
        filter_subject: str,
        handlers: dict[type[Message], Reaction],
        *,
        ack_wait: float = ACK_WAIT,
        retries: Retries | None = None,
    ) -> None:
        self.eventlog = eventlog
        # When a failed reaction is tried again (the service sets its own: Service.start).
        self.retries = retries or Retries()
        self.name = name
        self.filter_subject = filter_subject
        self.handlers = {cls.type_name(): fn for cls, fn in handlers.items()}
        self.ack_wait = ack_wait

    async def start(self) -> None:
        # The durable is made (and a cumulative-ack one replaced) by the setup role
        # (o_setup/topology.py); the service binds to it.
        self._sub = await bind_durable(
            self.eventlog,
            self.filter_subject,
            subjects.EVENTS_STREAM,
            self.name,
            reactor_config(self.name, self.filter_subject, self.ack_wait),
        )
        # The server's setting wins: heartbeats must come within the ack wait it applies.
        info = await self._sub.consumer_info()
        self.ack_wait = info.config.ack_wait or self.ack_wait
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
            # (By ack subject: a message is not hashable, and its ack subject is its own.)
            unacked = {msg.reply: msg for msg in msgs}
            heartbeat = asyncio.create_task(self._keep_alive(unacked))
            try:
                await self._react(msgs, unacked)
            finally:
                heartbeat.cancel()
                await asyncio.gather(heartbeat, return_exceptions=True)
            if len(msgs) < BATCH:
                await asyncio.sleep(GATHER)

    async def _react(self, msgs: list[Msg], unacked: dict[str, Msg]) -> None:
        """React to one pulled batch, acking each event once its reaction is done."""

        async def ack(msg: Msg) -> None:
            unacked.pop(msg.reply, None)
            await _settled(msg.ack)

        by_type: dict[str, list[tuple[Recorded, Msg]]] = {}
        for msg in msgs:
            name = known_type(msg.data)
            if name not in self.handlers:
                await ack(msg)
                continue
            try:
                record = Recorded(msg.metadata.sequence.stream, msg.subject, decode(msg.data))
            except MalformedMessage:
                # (Not an event anyone could have appended: projections refuse it too.)
                await ack(msg)
                continue
            by_type.setdefault(name, []).append((record, msg))
        for name, events in by_type.items():
            # The reaction is part of the trace of the events it reacts to.
            with reacting(f"{self.name} {name}", [msg.headers for _, msg in events]):
                await self._handle(self.handlers[name], events)
            for _, msg in events:
                await ack(msg)

    async def _keep_alive(self, unacked: dict[str, Msg]) -> None:
        """Tell the server, every ack_wait/3, that the batch's events not yet acked are
        still being reacted to (a slow reaction, retries with backoff)."""
        while True:
            await asyncio.sleep(self.ack_wait / 3)
            for msg in list(unacked.values()):
                await _settled(msg.in_progress)

    async def _handle(self, handler: Reaction, events: list[tuple[Recorded, Msg]]) -> None:
        """Handle the events, trying again in place until done or dead-lettered (so that
        later events of the same kind are not reacted to before them)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                await handler([record for record, _ in events])
                return
            except Exception as exc:
                if is_outage(exc):
                    log.warning("%s: reacting met an outage (%r); will retry", self.name, exc)
                    await asyncio.sleep(self.retries.delay(attempt, outage=True))
                elif attempt >= MAX_DELIVERIES:
                    for record, msg in events:
                        await dead_letter(
                            self.eventlog.js,
                            self.name,
                            msg.data,
                            f"failed {MAX_DELIVERIES} times: {exc!r}",
                            origin_subject=record.subject,
                            origin_seq=record.seq,
                        )
                    return
                else:
                    log.exception(
                        "%s: reacting to %d events failed; will retry", self.name, len(events)
                    )
                    await asyncio.sleep(self.retries.delay(attempt, outage=False))
