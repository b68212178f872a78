"""Projectors: Postgres read models built from the log, each event applied exactly once.

In one transaction a projector advances its checkpoint (only if the event's
stream sequence is past it), applies the change, and notifies waiters; then
it acks. A redelivered event finds the checkpoint already past it and is
skipped, so every event takes effect exactly once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar, cast

import asyncpg
from faststream import AckPolicy
from faststream.nats import JStream, NatsBroker, NatsMessage, PullSub
from nats.js.api import ConsumerConfig, DeliverPolicy

from o_contracts import subjects
from o_contracts.base import Message
from o_contracts.envelope import Envelope, MalformedMessage, decode
from o_runtime.dead_letters import dead_letter
from o_runtime.eventlog import EventLog, Recorded
from o_runtime.tracing import continued

log = logging.getLogger(__name__)

NOTIFY_CHANNEL = "o_projection"
# After this many failed deliveries an event whose handler keeps raising is
# dead-lettered, so one poison event cannot stall the projection forever.
MAX_DELIVERIES = 5

# Advance the checkpoint only past it (a redelivery finds no row) and notify
# waiters, in one round trip.
_ADVANCE = (
    "WITH advanced AS ("
    " INSERT INTO projection_checkpoints AS c (projection, last_seq) VALUES ($1, $2)"
    " ON CONFLICT (projection) DO UPDATE SET last_seq = EXCLUDED.last_seq, updated_at = now()"
    " WHERE c.last_seq < EXCLUDED.last_seq RETURNING last_seq)"
    " SELECT last_seq, pg_notify($3, $1::text || ':' || $2::bigint::text) FROM advanced"
)

Handler = Callable[[asyncpg.Connection, Recorded], Awaitable[None]]
E = TypeVar("E", bound=Message)
# A projection's handler for one event type: the typed event, and where it stands in the log.
EventHandler = Callable[[asyncpg.Connection, E, Recorded], Awaitable[None]]


def assignments(changes: Mapping[str, object], columns: Iterable[str], args: list[object]) -> str:
    """`, "column" = $n` for each of `columns` present in `changes`, values appended to `args`.

    For PATCH-like events that carry only what changed; columns are quoted
    because some are SQL keywords (`limit`).
    """
    out = []
    for column in columns:
        if column in changes:
            args.append(changes[column])
            out.append(f', "{column}" = ${len(args)}')
    return "".join(out)


class Outcome(Enum):
    APPLIED = "applied"
    SKIPPED = "skipped"
    DEAD_LETTERED = "dead_lettered"


@dataclass
class Projection:
    """What a projection is: its name, the events it reads, its tables, its handlers."""

    name: str
    filter_subject: str
    tables: list[str]
    handlers: dict[str, Handler] = field(default_factory=dict)

    def on(self, event_type: type[E]) -> Callable[[EventHandler[E]], EventHandler[E]]:
        """Register `fn(conn, event, recorded)` for events of `event_type`."""

        def register(fn: EventHandler[E]) -> EventHandler[E]:
            async def handle(conn: asyncpg.Connection, rec: Recorded) -> None:
                # Dispatch is by the wire type name, which decode() resolved to
                # exactly this class: the cast cannot be wrong.
                await fn(conn, cast(E, rec.envelope.data), rec)

            self.handlers[event_type.type_name()] = handle
            return fn

        return register


class Projector:
    def __init__(self, projection: Projection, pool: asyncpg.Pool, eventlog: EventLog) -> None:
        self.projection = projection
        self.pool = pool
        self.eventlog = eventlog

    @property
    def name(self) -> str:
        return self.projection.name

    async def apply(self, seq: int, subject: str, data: bytes) -> Outcome:
        try:
            envelope: Envelope[Message] | None = decode(data)
        except MalformedMessage:
            envelope = None
        if envelope is not None and envelope.type not in self.projection.handlers:
            # Nothing to change but the checkpoint: one statement, no transaction
            # (most events on a subject are some other projection's business).
            async with self.pool.acquire() as conn:
                advanced = await conn.fetchrow(_ADVANCE, self.name, seq, NOTIFY_CHANNEL)
            return Outcome.SKIPPED if advanced is None else Outcome.APPLIED
        async with self.pool.acquire() as conn, conn.transaction():
            return await self._apply_in(conn, seq, subject, data, live=True)

    async def _apply_in(
        self, conn: asyncpg.Connection, seq: int, subject: str, data: bytes, *, live: bool
    ) -> Outcome:
        # The row lock taken here also serialises us with a rebuild in progress;
        # the notification goes out only if (and when) the transaction commits.
        advanced = await conn.fetchrow(_ADVANCE, self.name, seq, NOTIFY_CHANNEL)
        if advanced is None:
            return Outcome.SKIPPED
        try:
            envelope: Envelope[Message] = decode(data)
        except MalformedMessage as exc:
            if live:
                await dead_letter(
                    self.eventlog.js,
                    f"projection-{self.name}",
                    data,
                    str(exc),
                    origin_subject=subject,
                    origin_seq=seq,
                )
            return Outcome.DEAD_LETTERED
        handler = self.projection.handlers.get(envelope.type)
        if handler is not None:
            await handler(conn, Recorded(seq, subject, envelope))
        return Outcome.APPLIED

    async def _notify(self, conn: asyncpg.Connection, seq: int) -> None:
        await conn.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, f"{self.name}:{seq}")

    async def on_message(self, msg: NatsMessage) -> None:
        raw = msg.raw_message
        meta = raw.metadata
        seq = meta.sequence.stream
        try:
            with continued(f"project {self.name}", raw.headers, seq=seq):
                outcome = await self.apply(seq, raw.subject, raw.data)
        except Exception as exc:
            if meta.num_delivered >= MAX_DELIVERIES:
                await self._give_up(raw.subject, seq, raw.data, exc)
                await msg.ack()
                return
            log.exception("projection %s failed on seq %d; will retry", self.name, seq)
            await msg.nack(delay=min(2.0**meta.num_delivered, 30.0))
            return
        log.debug("projection %s seq %d %s", self.name, seq, outcome.value)
        await msg.ack()

    async def _give_up(self, subject: str, seq: int, data: bytes, exc: Exception) -> None:
        reason = f"handler failed {MAX_DELIVERIES} times: {exc!r}"
        await dead_letter(
            self.eventlog.js,
            f"projection-{self.name}",
            data,
            reason,
            origin_subject=subject,
            origin_seq=seq,
        )
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "UPDATE projection_checkpoints SET last_seq = $2 "
                "WHERE projection = $1 AND last_seq < $2",
                self.name,
                seq,
            )
            await self._notify(conn, seq)

    def subscribe(self, broker: NatsBroker) -> None:
        """Attach this projector to a durable pull consumer on the broker.

        max_ack_pending=1 keeps events in stream order even when several
        replicas of the service share the consumer.
        """
        broker.subscriber(
            self.projection.filter_subject,
            stream=JStream(name=subjects.EVENTS_STREAM, declare=False),
            pull_sub=PullSub(batch_size=1, timeout=5.0),
            durable=f"projection-{self.name}",
            ack_policy=AckPolicy.MANUAL,
            config=ConsumerConfig(
                max_ack_pending=1,
                # With max_ack_pending=1, an event held by a killed process stalls
                # the projection this long before another replica gets it.
                ack_wait=float(os.environ.get("O_PROJECTION_ACK_WAIT", "30")),
                deliver_policy=DeliverPolicy.ALL,
            ),
            title=f"projection {self.name}",
            description=f"Builds the '{self.name}' read model in Postgres",
        )(self._handle)

    async def _handle(self, body: bytes, msg: NatsMessage) -> None:
        await self.on_message(msg)

    async def rebuild(self) -> int:
        """Drop the projection's rows and replay the log into it, in one transaction.

        Readers keep seeing the old rows until the commit (DELETE, not
        TRUNCATE, so they are not blocked); the live projector waits on the
        checkpoint row lock and afterwards skips what the rebuild applied.
        Returns the number of events replayed.
        """
        count = 0
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO projection_checkpoints (projection) VALUES ($1)"
                " ON CONFLICT DO NOTHING",
                self.name,
            )
            await conn.execute(
                "SELECT 1 FROM projection_checkpoints WHERE projection = $1 FOR UPDATE",
                self.name,
            )
            for table in self.projection.tables:
                await conn.execute(f"DELETE FROM {table}")
            await conn.execute(
                "UPDATE projection_checkpoints SET last_seq = 0 WHERE projection = $1",
                self.name,
            )
            async for raw in self.eventlog.replay(self.projection.filter_subject):
                await self._apply_in(conn, raw.seq, raw.subject, raw.data, live=False)
                count += 1
        return count
