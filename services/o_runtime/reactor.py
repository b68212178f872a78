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
process's own restart; while it holds events (reacting to a batch, or delivered and waiting
their turn) the reactor tells the server it is still at work (`in_progress`) every
ACK_WAIT/3, so a slow reaction is not delivered again under it. Reactors keep no holdings
(o_runtime/holdings.py: a KV write per batch, which command consumers pay to be given back
at once): a reaction late by a few seconds after a crash costs no one a wait (a sleep-time
turn, an archived decision, a file's processing started).

Events come through one pull request kept open (o_runtime/deliveries.py): the server
delivers each as it is appended, and the reactor reacts to what has come, in log order,
without a pull request and its status message beside every event.

Each event is acked on its own (AckPolicy.EXPLICIT). Cumulative acks (AckPolicy.ALL) lost
events: an ack of event N also acks every earlier event still held by another replica, or by
a process that died while reacting, so those were never delivered again
(tests/integration/test_reactor.py). An event reacted to is acked once its reaction is done.
An event no reaction is for (most of them: a run's events, to a reactor of run ends) is acked
with the next ack sent, or within ACK_LATER: acks sent together go out in one write, so a
run's three events cost the reactor one write instead of three. A process that dies before
acking them only has them delivered again, to be ignored again.
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
from o_runtime.commands import MAX_DELIVERIES, PULL_EXPIRES, bind_durable
from o_runtime.dead_letters import dead_letter
from o_runtime.deliveries import Deliveries
from o_runtime.eventlog import EventLog, Recorded
from o_runtime.outages import is_outage
from o_runtime.retries import Retries
from o_runtime.tracing import reacting

log = logging.getLogger(__name__)

# A reaction gets the events of its types from one batch, in log order.
Reaction = Callable[[list[Recorded]], Awaitable[None]]
# One pull request asks for up to this many events (most concern no reaction), and stays
# open for PULL_EXPIRES unless they came sooner.
BATCH = 256
# An ignored event's ack waits at most this long for another ack to go with (well within
# ACK_WAIT/3: no heartbeat is needed for it), and at most this many wait at once.
ACK_LATER = 0.5
ACKS_LATER = 128
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
        sub = await bind_durable(
            self.eventlog,
            self.filter_subject,
            subjects.EVENTS_STREAM,
            self.name,
            reactor_config(self.name, self.filter_subject, self.ack_wait),
        )
        # The server's setting wins: heartbeats must come within the ack wait it applies.
        info = await sub.consumer_info()
        self.ack_wait = info.config.ack_wait or self.ack_wait
        # (Its deliveries come to an inbox of Deliveries' own: the binding's is not used.)
        await sub.unsubscribe()
        self._deliveries = Deliveries(
            self.eventlog, subjects.EVENTS_STREAM, self.name, BATCH, PULL_EXPIRES
        )
        await self._deliveries.start()
        # Events of the batch being reacted to, not acked yet (by ack subject: a message is
        # not hashable, and its ack subject is its own); and ignored events whose acks wait.
        self._unacked: dict[str, Msg] = {}
        self._later: list[Msg] = []
        self._later_since = 0.0
        self._pulling = asyncio.create_task(self._pull(), name=f"reactor {self.name}")
        self._heartbeat = asyncio.create_task(self._keep_alive(), name=f"heartbeat {self.name}")

    async def stop(self) -> None:
        for task in (self._pulling, self._heartbeat):
            task.cancel()
        await asyncio.gather(self._pulling, self._heartbeat, return_exceptions=True)
        # (Ignored events' acks are always safe to send; one not sent costs a redelivery.)
        await self._ack_later()
        with contextlib.suppress(Exception):
            await self._deliveries.stop()

    async def _pull(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            wait = PULL_EXPIRES
            if self._later:
                wait = max(0.0, self._later_since + ACK_LATER - loop.time())
            msgs = await self._deliveries.take(wait)
            if msgs:
                await self._react(msgs)
            if self._later and (
                len(self._later) >= ACKS_LATER or loop.time() >= self._later_since + ACK_LATER
            ):
                await self._ack_later()

    async def _react(self, msgs: list[Msg]) -> None:
        """React to what came, acking each event once its reaction is done."""
        by_type: dict[str, list[tuple[Recorded, Msg]]] = {}
        for msg in msgs:
            name = known_type(msg.data)
            if name not in self.handlers:
                self._ignore(msg)
                continue
            try:
                record = Recorded(msg.metadata.sequence.stream, msg.subject, decode(msg.data))
            except MalformedMessage:
                # (Not an event anyone could have appended: projections refuse it too.)
                self._ignore(msg)
                continue
            by_type.setdefault(name, []).append((record, msg))
            self._unacked[msg.reply] = msg
        for name, events in by_type.items():
            # The reaction is part of the trace of the events it reacts to.
            with reacting(f"{self.name} {name}", [msg.headers for _, msg in events]):
                await self._handle(self.handlers[name], events)
            for _, msg in events:
                self._unacked.pop(msg.reply, None)
                await _settled(msg.ack)
            # (Written with the acks just sent.)
            await self._ack_later()

    def _ignore(self, msg: Msg) -> None:
        if not self._later:
            self._later_since = asyncio.get_running_loop().time()
        self._later.append(msg)

    async def _ack_later(self) -> None:
        later, self._later = self._later, []
        for msg in later:
            await _settled(msg.ack)

    async def _keep_alive(self) -> None:
        """Tell the server, every ack_wait/3, that the events held here are still being
        reacted to (a slow reaction, retries with backoff) or waiting their turn."""
        while True:
            await asyncio.sleep(self.ack_wait / 3)
            for msg in [*self._unacked.values(), *self._deliveries.waiting()]:
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
