"""The JetStream log: O's write-ahead log.

A state change exists once its event is acknowledged by the stream. Appends
carry `Nats-Msg-Id` (a retried publish is deduplicated by the stream) and,
for optimistic concurrency, `Nats-Expected-Last-Subject-Sequence`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import nats
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js.api import (
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, NotFoundError
from nats.js.kv import KeyValue

from o_contracts import subjects
from o_contracts.base import Message
from o_contracts.envelope import Envelope, decode
from o_runtime.images import Images
from o_runtime.nats_identity import Identity
from o_runtime.nats_tls_records import deliveries_in_one_record
from o_runtime.tracing import inject

log = logging.getLogger(__name__)

# JetStream's error code for a stale Nats-Expected-Last-Subject-Sequence.
WRONG_LAST_SEQUENCE = 10071
DEDUP_WINDOW_SECONDS = 120.0


class ConcurrencyConflict(Exception):
    """The subject moved on since the caller read it; decide again on fresh state."""

    def __init__(self, subject: str, expected: int | None) -> None:
        super().__init__(f"{subject} is no longer at sequence {expected}")
        self.subject = subject
        self.expected = expected


class AppendRejected(Exception):
    """The decision function refused the change; carries a user-facing reason."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class EventTooLarge(AppendRejected):
    """The event would not fit in a NATS message (max_payload): it is refused before sending."""

    def __init__(self, subject: str, kind: str, size: int, limit: int) -> None:
        super().__init__(
            f"{kind} on {subject} would be {size} bytes, over the log's limit of {limit}", 413
        )


# A consumer made for one read (a replay, a streamed run) is removed by the
# server this long after its subscriber is gone (its default is 5 s; nats-py's
# KV watchers keep theirs 5 minutes). A stream holds at most 1000 consumers.
SHORT_LIVED_CONSUMER = 2.0
# How long closing waits for the connection to drain.
CLOSE_TIMEOUT = 3.0
# Room left for a message's headers (ids, trace context) within max_payload.
HEADERS_ROOM = 4096
# How long a direct get may take (nats-py's default request timeout is 0.5 s).
DIRECT_GET_TIMEOUT = 5.0


@dataclass(frozen=True)
class Appended:
    seq: int
    duplicate: bool


@dataclass(frozen=True)
class Recorded:
    """An event read back from the log with its stream sequence."""

    seq: int
    subject: str
    envelope: Envelope[Message]


def stream_configs(replicas: int = 1) -> list[StreamConfig]:
    """O's streams; `replicas`: 1 on a single server, 3 on the k8s NATS cluster
    (Settings.stream_replicas, O_STREAM_REPLICAS)."""
    return [
        StreamConfig(
            name=subjects.EVENTS_STREAM,
            subjects=[subjects.ALL_EVENTS],
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            # No age or size limit: the log is the truth and projections are
            # rebuilt from it.
            max_age=0,
            duplicate_window=DEDUP_WINDOW_SECONDS,
            discard=DiscardPolicy.NEW,
            allow_direct=True,
            num_replicas=replicas,
        ),
        StreamConfig(
            name=subjects.COMMANDS_STREAM,
            subjects=[subjects.ALL_COMMANDS],
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            # Commands are kept a week for audit; their effects live on as events.
            max_age=7 * 24 * 3600.0,
            duplicate_window=DEDUP_WINDOW_SECONDS,
            # The executor's run queue reads an agent's next command by subject.
            allow_direct=True,
            num_replicas=replicas,
        ),
        StreamConfig(
            name=subjects.DEAD_LETTER_STREAM,
            subjects=[subjects.ALL_DEAD_LETTERS],
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            max_age=30 * 24 * 3600.0,
            num_replicas=replicas,
        ),
    ]


async def ensure_streams(js: JetStreamContext, replicas: int = 1) -> None:
    """Create the streams, or bring their settings up to date (idempotent)."""
    for config in stream_configs(replicas):
        try:
            await js.add_stream(config)
        except BadRequestError:
            # Exists with other settings (an older release): update in place.
            await js.update_stream(config)


async def wait_for_streams(js: JetStreamContext, name: str, pause: float = 0.5) -> None:
    """Return once O's streams exist: made by the setup role, never by a service."""
    # (The log's stream: the setup role makes them all at once, and a service's identity
    # may see this one.)
    waiting = False
    while True:
        try:
            await js.stream_info(subjects.EVENTS_STREAM)
            return
        except NotFoundError:
            if not waiting:
                log.warning(
                    "%s: the log's stream does not exist yet; waiting for the setup role"
                    " (python -m o_setup apply)",
                    name,
                )
                waiting = True
            await asyncio.sleep(pause)


class EventLog:
    def __init__(self, nc: NatsClient, replicas: int = 1, role: str = "operator") -> None:
        self.nc = nc
        # Whose identity the connection has (its liveness subject: o_runtime/liveness.py).
        self.role = role
        self.js = nc.jetstream()
        self.replicas = replicas
        self._reconnect_waiters: set[asyncio.Future[None]] = set()
        self._images: Images | None = None
        self._buckets: dict[str, KeyValue] = {}

    async def bucket(self, name: str) -> KeyValue:
        """A key-value bucket, bound at first use (BucketNotFoundError if there is none)."""
        if name not in self._buckets:
            self._buckets[name] = await self.js.key_value(name)
        return self._buckets[name]

    async def images(self) -> Images:
        """The images object store (o_runtime/images.py), opened at first use."""
        if self._images is None:
            self._images = await Images.open(self.js, self.replicas)
        return self._images

    async def until_reconnected(self) -> None:
        """Return at this connection's next reconnection to NATS.

        What a client keeps only on the server (a pull request waiting there, an ordered
        consumer) is gone when nats-server restarts; nats-py itself only notices at the
        request's expiry or after missed heartbeats (10-20 s).
        """
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reconnect_waiters.add(waiter)
        try:
            await waiter
        finally:
            self._reconnect_waiters.discard(waiter)

    def _reconnected(self) -> None:
        for waiter in self._reconnect_waiters:
            if not waiter.done():
                waiter.set_result(None)

    @classmethod
    async def connect(
        cls,
        url: str,
        name: str,
        replicas: int = 1,
        identity: Identity | None = None,
        jetstream: bool = True,
    ) -> EventLog:
        """Connect as `identity` (default: the one `O_NATS_NKEY` names, with the operator's
        inboxes) once O's streams exist (the setup role makes them: o_setup); with
        `jetstream` False, at once (core NATS only: the tool sandbox)."""
        import time

        identity = identity or Identity.of("operator")

        # Set once connected (the callbacks below may run before).
        conn: list[NatsClient] = []
        logs: list[EventLog] = []
        lost_at: list[float] = []

        async def on_error(exc: Exception) -> None:
            # nats-py's default logs every failed reconnect attempt at ERROR with a traceback;
            # losing the connection is reported once, by on_disconnected.
            if isinstance(exc, OSError | nats.errors.StaleConnectionError) or (
                conn and not conn[0].is_connected
            ):
                log.debug("NATS (%s): %r", name, exc)
            else:
                log.error("NATS (%s): %r", name, exc, exc_info=exc)

        async def on_disconnected() -> None:
            if conn and not conn[0].is_closed:
                lost_at[:] = [time.monotonic()]
                log.warning("NATS connection of %s lost; reconnecting", name)

        async def on_reconnected() -> None:
            away = time.monotonic() - lost_at[0] if lost_at else 0.0
            log.warning("NATS connection of %s back after %.2fs", name, away)
            for eventlog in logs:
                eventlog._reconnected()

        nc = await nats.connect(
            url,
            name=name,
            max_reconnect_attempts=-1,
            # How long nats-py waits before trying a server again (default 2 s). A killed
            # nats-server is back in ~0.05 s (supervisor.ServerKeeper), but the clients' first
            # attempt comes before that and fails: they stayed away ~2 s longer than needed.
            reconnect_time_wait=0.1,
            # A server gone without a word (a lost host: no RST) is noticed after two
            # unanswered pings: 20 s rather than the default 4 min.
            ping_interval=10,
            max_outstanding_pings=2,
            error_cb=on_error,
            disconnected_cb=on_disconnected,
            reconnected_cb=on_reconnected,
            **identity.options(),
        )
        conn.append(nc)
        if identity.tls is not None:
            deliveries_in_one_record(nc)
        self = cls(nc, replicas, identity.role)
        logs.append(self)
        if jetstream:
            await wait_for_streams(self.js, name)
        return self

    async def close(self) -> None:
        # Draining waits for NATS to take what is buffered; with NATS down it
        # would wait for ever, and a service asked to stop must stop.
        try:
            await asyncio.wait_for(self.nc.drain(), CLOSE_TIMEOUT)
        except Exception as exc:
            log.warning("NATS connection not drained (%r); closing it", exc)
            await self.nc.close()

    def _fitting(self, subject: str, envelope: Envelope[Any]) -> bytes:
        """The envelope's bytes; EventTooLarge if NATS would refuse them (a clear error
        where the caller can act on it, instead of a failed publish or a poisoned stream)."""
        data = envelope.encode()
        limit = self.nc.max_payload - HEADERS_ROOM
        if len(data) > limit:
            raise EventTooLarge(subject, envelope.type, len(data), limit)
        return data

    async def last_seq(self, subject: str) -> int:
        """The stream sequence of the subject's last event, 0 if it has none."""
        try:
            # A direct get: served without the JetStream API layer (~50 us less).
            msg = await self.js.get_last_msg(subjects.EVENTS_STREAM, subject, direct=True)
        except NotFoundError:
            return 0
        return int(msg.seq or 0)

    async def last_seq_matching(self, filter_subject: str) -> int:
        """The stream sequence of the last event on any subject `filter_subject` matches
        (wildcards allowed), 0 if there is none."""
        # The request's JSON form: the subject form cannot carry a wildcard.
        reply = await self.nc.request(
            f"$JS.API.DIRECT.GET.{subjects.EVENTS_STREAM}",
            json.dumps({"last_by_subj": filter_subject}).encode(),
            timeout=DIRECT_GET_TIMEOUT,
        )
        headers = reply.headers or {}
        status = headers.get("Status")
        if status == "404":
            return 0
        if status is not None or "Nats-Sequence" not in headers:
            raise RuntimeError(f"direct get of {filter_subject}'s last event failed: {headers}")
        return int(headers["Nats-Sequence"])

    async def end(self) -> int:
        """The events stream's last sequence."""
        info = await self.js.stream_info(subjects.EVENTS_STREAM)
        return int(info.state.last_seq)

    async def append(
        self, subject: str, envelope: Envelope[Any], expected_last_seq: int | None = None
    ) -> Appended:
        """Append one event. With `expected_last_seq`, only if the subject is still there."""
        headers = inject({"Nats-Msg-Id": envelope.id})
        if expected_last_seq is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(expected_last_seq)
        data = self._fitting(subject, envelope)
        try:
            ack = await self.js.publish(
                subject, data, stream=subjects.EVENTS_STREAM, headers=headers
            )
        except BadRequestError as exc:
            if exc.err_code == WRONG_LAST_SEQUENCE:
                raise ConcurrencyConflict(subject, expected_last_seq) from exc
            raise
        return Appended(seq=ack.seq, duplicate=bool(ack.duplicate))

    async def append_decided(
        self,
        subject: str,
        decide: Callable[[int], Awaitable[Envelope[Any] | None]],
        attempts: int = 5,
    ) -> Appended | None:
        """Optimistic concurrency: decide on the subject's current state, append, retry.

        `decide(last_seq)` sees the subject at `last_seq` (callers wait for their
        projection to reach it) and returns the event to append, None for
        nothing to do, or raises AppendRejected. A conflicting append is
        decided again on fresh state; after `attempts` it is an error, never a
        silent drop.
        """
        for _ in range(attempts):
            last = await self.last_seq(subject)
            envelope = await decide(last)
            if envelope is None:
                return None
            try:
                return await self.append(subject, envelope, expected_last_seq=last)
            except ConcurrencyConflict:
                log.info("append conflict on %s at %d; deciding again", subject, last)
        raise AppendRejected(f"too many concurrent changes to {subject}; try again", status=409)

    async def send_command(
        self,
        subject: str,
        envelope: Envelope[Any],
        reply_to: str | None = None,
        msg_id: str | None = None,
    ) -> Appended:
        """Publish a command; `msg_id` (default: the envelope's id) is what the stream dedups on."""
        headers = inject({"Nats-Msg-Id": msg_id or envelope.id})
        if reply_to:
            headers["O-Reply-To"] = reply_to
        ack = await self.js.publish(
            subject,
            self._fitting(subject, envelope),
            stream=subjects.COMMANDS_STREAM,
            headers=headers,
        )
        return Appended(seq=ack.seq, duplicate=bool(ack.duplicate))

    async def replay(self, filter_subject: str, start_seq: int = 1) -> AsyncGenerator[RawEvent]:
        """Read events in stream order, from `start_seq` to the current end.

        Uses an ordered (ephemeral) consumer: gaps are detected and the
        consumer recreated by the client, so nothing is skipped. Yields raw
        bytes; the caller decodes, so it decides what an undecodable event means.
        """
        info = await self.js.stream_info(subjects.EVENTS_STREAM)
        end = info.state.last_seq
        if end < start_seq:
            return
        sub = await self.js.subscribe(
            filter_subject,
            stream=subjects.EVENTS_STREAM,
            ordered_consumer=True,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=start_seq,
                inactive_threshold=SHORT_LIVED_CONSUMER,
            ),
        )
        try:
            consumer = await sub.consumer_info()
            # Pending counts only what the server has not pushed yet.
            delivered = consumer.delivered.consumer_seq if consumer.delivered else 0
            if consumer.num_pending == 0 and not delivered:
                return
            while True:
                msg = await sub.next_msg(timeout=10)
                meta = msg.metadata
                yield RawEvent(meta.sequence.stream, msg.subject, msg.data, msg.headers)
                if meta.num_pending == 0 or meta.sequence.stream >= end:
                    return
        finally:
            await sub.unsubscribe()

    async def read_subject(self, subject: str) -> list[Recorded]:
        """One aggregate's whole history, decoded (undecodable events raise)."""
        return [
            Recorded(raw.seq, raw.subject, decode(raw.data)) async for raw in self.replay(subject)
        ]


@dataclass(frozen=True)
class RawEvent:
    seq: int
    subject: str
    data: bytes
    # NATS headers as appended (the trace context travels in them).
    headers: dict[str, str] | None = None
