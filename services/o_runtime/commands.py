"""Command consumers (durable, acked after the effect is committed) and senders.

A command handler returns a `Reply`; when the command carried an `O-Reply-To`
header the reply is published there, so a caller such as the gateway can wait
for the outcome. Malformed commands are dead-lettered and, if someone waits,
answered with the reason; the consumer goes on.

A command held by a process that dies is given back at once by a replica that outlives it
(or its own restart): holdings.py keeps what each process holds, takeover.py naks what a
dead one held. JetStream's own redelivery after ack_wait remains for a holder that stopped
without dying (a stall longer than ack_wait, heartbeats and all).

Consumers are durable JetStream pull consumers driven with nats-py directly:
FastStream's pull subscriber (middlewares, dependency injection, an anyio task
group) cost ~0.4 ms per command even on an idle machine (publish to handler:
0.63-0.78 ms against 0.24-0.33 ms), and every agent run starts with a command.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgpack
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from o_contracts import subjects
from o_contracts.admission import wrong_subject
from o_contracts.base import Command, Message, Reply
from o_contracts.envelope import Envelope, MalformedMessage, decode
from o_runtime.dead_letters import dead_letter
from o_runtime.eventlog import AppendRejected, EventLog
from o_runtime.holdings import Holdings
from o_runtime.instruments import measured
from o_runtime.nats_flush import FLUSH_WITHIN, flush
from o_runtime.outages import is_outage
from o_runtime.refusals import Refusals
from o_runtime.retries import Retries
from o_runtime.takeover import Takeover
from o_runtime.tracing import continued

log = logging.getLogger(__name__)

REPLY_HEADER = "O-Reply-To"
MAX_DELIVERIES = 5
# How long one pull request waits on the server for a command.
PULL_EXPIRES = 5.0
# How long a command waits, at most, for its holder to be on record before work starts.
HELD_BEFORE_WORK = 0.5


async def _on_record() -> bool:
    return True


@dataclass(frozen=True)
class Delivery:
    """Where the command being handled sits in the commands stream, and how often it came."""

    stream_seq: int
    num_delivered: int
    # Whether this process is on record as holding the command (o_runtime/holdings.py).
    # A handler of a consumer made with `reads_before_held` awaits it before its first
    # effect; for the others it is true before they start.
    held: Callable[[], Awaitable[bool]] = _on_record

    @property
    def redelivered(self) -> bool:
        return self.num_delivered > 1

    @property
    def last_attempt(self) -> bool:
        return self.num_delivered >= MAX_DELIVERIES


CommandHandler = Callable[[Envelope[Any], Delivery], Awaitable[Reply]]


class Refused(Exception):
    """A well-formed command that may not be taken (its subject names something else)."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(reason)
        self.status = status


class HandedOver(Exception):
    """Raised by a handler: this delivery is no longer the command's (another process took it
    over, which the log shows); neither ack nor nak it, nor answer: the other delivery does."""


class Deferred(Exception):
    """Raised by a handler: not yet (another command must go first); redeliver later.

    Not counted as a failure: a deferred command is never dead-lettered.
    """

    def __init__(self, delay: float) -> None:
        super().__init__(f"deferred for {delay}s")
        self.delay = delay


async def pulled(sub: JetStreamContext.PullSubscription, batch: int, name: str) -> list[Msg]:
    """Up to `batch` messages of a durable consumer; none if none came within PULL_EXPIRES,
    or if pulling failed (said, and after a pause, so a broken server is not hammered)."""
    try:
        msgs: list[Msg] = await sub.fetch(batch, timeout=PULL_EXPIRES)
    except (NatsTimeoutError, TimeoutError):
        # (nats-py also raises a plain TimeoutError when its no-wait probe used up the
        # whole timeout: nothing came, not a failure worth a pause.)
        return []
    except asyncio.CancelledError:
        raise
    except Exception:
        log.warning("%s: pulling failed; trying again", name, exc_info=True)
        await asyncio.sleep(1.0)
        return []
    return msgs


def command_consumer_config(
    ack_wait: float, max_ack_pending: int, max_deliver: int = -1
) -> ConsumerConfig:
    """A command consumer's settings on the server (its durable is made by o_setup)."""
    return ConsumerConfig(
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        max_ack_pending=max_ack_pending,
        max_deliver=max_deliver,
    )


class DurableMissing(RuntimeError):
    """A durable consumer the setup role should have made is not there."""


async def bind_durable(
    eventlog: EventLog, filter_subject: str, stream: str, name: str, config: ConsumerConfig
) -> JetStreamContext.PullSubscription:
    """Pull from durable consumer `name` of `stream`, made by the setup role.

    A service's identity may not create consumers (docs/security.md): when `name` is
    missing it is made here only if this identity may; otherwise the error says whose job
    that is instead of a bare timeout.
    """
    try:
        return await eventlog.js.pull_subscribe(
            filter_subject, durable=name, stream=stream, config=config
        )
    except NatsTimeoutError as exc:
        raise DurableMissing(
            f"durable consumer {name} on {stream} is missing and this identity may not make it:"
            " run the setup role first (python -m o_setup apply; o_setup/topology.py)"
        ) from exc


class CommandConsumer:
    def __init__(
        self,
        eventlog: EventLog,
        name: str,
        filter_subject: str,
        handlers: dict[type[Command], CommandHandler],
        *,
        # Handlers heartbeat every ack_wait/3 while they work; a command held by
        # a process that died is delivered again after ack_wait.
        ack_wait: float = 10.0,
        concurrency: int = 16,
        max_deliver: int | None = None,
        max_ack_pending: int | None = None,
        reads_before_held: bool = False,
        retries: Retries | None = None,
    ) -> None:
        self.eventlog = eventlog
        # When a failed command is tried again (the service sets its own: Service.start).
        self.retries = retries or Retries()
        # Whether handlers start at once and await `delivery.held()` before their first
        # effect, instead of starting once the take is written: their reads (a run's
        # state, its turn) then overlap that write's round trip. A death before it lands
        # is covered as one before a handler starts (by the ack wait).
        self.reads_before_held = reads_before_held
        self.name = name
        self.filter_subject = filter_subject
        self.handlers = {cls.type_name(): fn for cls, fn in handlers.items()}
        self.ack_wait = ack_wait
        self.concurrency = concurrency
        # Bounds redeliveries of a command whose consumer died mid-way (-1: unbounded).
        self.max_deliver = max_deliver or -1
        # In flight across all replicas sharing the durable consumer (default:
        # one replica's concurrency).
        self.max_ack_pending = max_ack_pending or concurrency

    async def start(self) -> None:
        # The setup role makes the durable consumer (o_setup/topology.py); a service only
        # binds to it. (Made here only for identities that may: tests, operators.)
        self._sub = await bind_durable(
            self.eventlog,
            self.filter_subject,
            subjects.COMMANDS_STREAM,
            self.name,
            command_consumer_config(self.ack_wait, self.max_ack_pending, self.max_deliver),
        )
        # The server's setting wins: heartbeats must come within the ack wait it applies.
        info = await self._sub.consumer_info()
        self.ack_wait = info.config.ack_wait or self.ack_wait
        # What this process holds, kept where a survivor finds it; what a dead one held,
        # given back (module docstring).
        self.holdings = await Holdings.open(self.eventlog, self.name)
        self.refusals = await Refusals.open(self.eventlog.js, self.name, self.eventlog.replicas)
        self.takeover = Takeover(self.eventlog, self.holdings.kv, self.holdings)
        await self.takeover.start()
        self._handling: set[asyncio.Task[None]] = set()
        # Handler slots outlive a pull loop restarted by _repull.
        self._slots = asyncio.Semaphore(self.concurrency)
        self._pulling = asyncio.create_task(self._pull(self._sub), name=f"commands {self.name}")
        self._repulling = asyncio.create_task(self._repull(), name=f"repull {self.name}")

    async def _repull(self) -> None:
        # The pull request waiting on a nats-server that died is gone with it: without a new
        # one at once, this consumer would sit out its expiry (PULL_EXPIRES) after a restart.
        while True:
            await self.eventlog.until_reconnected()
            self._pulling.cancel()
            await asyncio.gather(self._pulling, return_exceptions=True)
            self._pulling = asyncio.create_task(self._pull(self._sub), name=f"commands {self.name}")

    async def stop(self) -> None:
        """Stop taking commands; those in hand are given back (nakked: another replica, or
        this one's restart, takes them at once)."""
        tasks = [self._repulling, self._pulling, *self._handling]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # No more pulls first: a pull request of ours still waiting on the server would
        # take back the very commands nakked below (the server skips requests whose
        # inbox has no interest left).
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()
            await flush(self.eventlog.nc, FLUSH_WITHIN)
        await self.takeover.stop()
        held = self.holdings.replies
        # The entry goes first: a nak names only the stream sequence (holdings.py).
        await self.holdings.close()
        with contextlib.suppress(Exception):
            for reply in held:
                await self.eventlog.nc.publish(reply, b"-NAK")
            await flush(self.eventlog.nc, FLUSH_WITHIN)

    async def _pull(self, sub: JetStreamContext.PullSubscription) -> None:
        # One pull request out at a time, and only while a handler slot is free.
        slots = self._slots
        while True:
            await slots.acquire()
            try:
                msgs = await pulled(sub, 1, self.name)
            except asyncio.CancelledError:
                slots.release()
                raise
            if not msgs:
                slots.release()
                continue
            # (Before any await: a message in hand is always in the holdings; _handle
            # waits for them to be written.)
            self.holdings.hold(msgs[0].reply)
            task = asyncio.create_task(self._handle(msgs[0]))
            self._handling.add(task)
            task.add_done_callback(self._handling.discard)
            task.add_done_callback(lambda _: slots.release())
            task.add_done_callback(self._report)

    def _report(self, task: asyncio.Task[None]) -> None:
        # Handlers' own failures are nacked or dead-lettered in _handle; this is
        # what went wrong around them (an ack on a lost connection): the command
        # is redelivered after ack_wait.
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: handling a command failed", self.name, exc_info=task.exception())

    async def _handle(self, raw: Msg) -> None:
        """Handle one command, timed (o.command.duration, by type and outcome)."""
        start = time.perf_counter()
        handled = ("unknown", "failed")
        try:
            # On record as held before any work (or, reads_before_held, before the
            # handler's first effect): a death from here on is seen by a survivor at once
            # (module docstring). Written together with whatever else was taken meanwhile;
            # if NATS cannot take it now, the work goes on regardless (a death then waits
            # for the ack_wait, as before).
            if not self.reads_before_held:
                await self.holdings.written(HELD_BEFORE_WORK)
            handled = await self._process(raw)
        finally:
            measured.command_duration.record(
                time.perf_counter() - start,
                {"consumer": self.name, "command": handled[0], "outcome": handled[1]},
            )

    async def _process(self, raw: Msg) -> tuple[str, str]:
        """Handle one command: its type, and what became of it (ok, refused, deferred,
        outage, failed, dead_lettered)."""
        meta = raw.metadata
        reply_to = (raw.headers or {}).get(REPLY_HEADER)
        try:
            # Commands come from outside too: what cannot be recorded is refused here.
            envelope: Envelope[Message] = decode(raw.data, storable=True)
            handler = self.handlers.get(envelope.type)
            if handler is None:
                raise MalformedMessage(f"{self.name} does not handle {envelope.type}")
            # The subject names what it acts on (ownership by subject: o_contracts/admission.py).
            wrong = wrong_subject(raw.subject, envelope.data)
            if wrong is not None:
                raise Refused(wrong, 403)
        except (MalformedMessage, Refused) as exc:
            await dead_letter(
                self.eventlog.js,
                self.name,
                raw.data,
                str(exc),
                origin_subject=raw.subject,
                origin_seq=meta.sequence.stream,
            )
            status = exc.status if isinstance(exc, Refused) else 400
            await self._reply(reply_to, Reply(ok=False, error=str(exc), status=status))
            await self._ack(raw)
            return "malformed", "dead_lettered"
        if meta.num_delivered > 1:
            # Refused before, and its ack lost: answered as it was, never decided again on
            # what changed since (o_runtime/refusals.py).
            refused = await self.refusals.recorded(envelope.id)
            if refused is not None:
                await self._reply(reply_to, refused)
                await self._ack(raw)
                return envelope.type, "refused"
        # Long commands (an agent run) keep telling the server they are alive,
        # so the command is not redelivered to another replica meanwhile.
        heartbeat = asyncio.create_task(self._keep_alive(raw))
        delivery = Delivery(
            meta.sequence.stream,
            meta.num_delivered,
            held=lambda: self.holdings.written(HELD_BEFORE_WORK),
        )
        try:
            with continued(
                f"{self.name} {envelope.type}",
                raw.headers,
                aggregate_id=envelope.aggregate_id,
                command_id=envelope.id,
            ):
                reply = await handler(envelope, delivery)
        except AppendRejected as exc:
            reply = Reply(ok=False, error=exc.reason, status=exc.status)
        except HandedOver:
            self.holdings.release(raw.reply)
            return envelope.type, "handed_over"
        except Deferred as exc:
            await self._nak(raw, exc.delay)
            return envelope.type, "deferred"
        except Exception as exc:
            if is_outage(exc):
                # Not the command's fault: tried again once the server is back,
                # however long that takes (never dead-lettered for it).
                log.warning("%s: %s met an outage (%r); will retry", self.name, envelope.type, exc)
                await self._nak(raw, self.retries.delay(meta.num_delivered, outage=True))
                return envelope.type, "outage"
            if meta.num_delivered >= MAX_DELIVERIES:
                reason = f"failed {MAX_DELIVERIES} times: {exc!r}"
                await dead_letter(
                    self.eventlog.js,
                    self.name,
                    raw.data,
                    reason,
                    origin_subject=raw.subject,
                    origin_seq=meta.sequence.stream,
                )
                await self._reply(reply_to, Reply(ok=False, error=reason, status=500))
                await self._ack(raw)
                return envelope.type, "dead_lettered"
            log.exception("%s: %s failed; will retry", self.name, envelope.type)
            await self._nak(raw, self.retries.delay(meta.num_delivered, outage=False))
            return envelope.type, "failed"
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        if not reply.ok:
            try:
                await self.refusals.record(envelope.id, reply)
            except Exception as exc:
                if not is_outage(exc):
                    raise
                # (Not answered yet: decided again once the server is back.)
                await self._nak(raw, self.retries.delay(meta.num_delivered, outage=True))
                return envelope.type, "outage"
        await self._reply(reply_to, reply)
        await self._ack(raw)
        return envelope.type, "ok" if reply.ok else "refused"

    async def _ack(self, msg: Msg) -> None:
        try:
            await msg.ack()
        finally:
            # (An ack that could not be sent: redelivered after ack_wait, to anyone.)
            self.holdings.release(msg.reply)

    async def _nak(self, msg: Msg, delay: float) -> None:
        # Out of the holdings before the nak: the message may go to another replica next,
        # and a stale entry naks by stream sequence (holdings.py).
        self.holdings.release(msg.reply)
        await self.holdings.written()
        await msg.nak(delay=delay)

    async def _keep_alive(self, msg: Msg) -> None:
        while True:
            await asyncio.sleep(self.ack_wait / 3)
            await msg.in_progress()

    async def _reply(self, reply_to: str | None, reply: Reply) -> None:
        if reply_to:
            await self.eventlog.nc.publish(reply_to, encode_reply(reply))


def encode_reply(reply: Reply) -> bytes:
    packed: bytes = msgpack.packb(reply.model_dump(mode="json"), use_bin_type=True)
    return packed


def decode_reply(data: bytes) -> Reply:
    return Reply.model_validate(msgpack.unpackb(data, raw=False))


class CommandTimeout(TimeoutError):
    pass


class Replies:
    """Where this process's commands are answered: one wildcard inbox subscription.

    A subscription per command (subscribe, then unsubscribe) was two more
    protocol messages and an interest change in nats-server for every request.
    """

    def __init__(self, eventlog: EventLog) -> None:
        self.nc = eventlog.nc
        self.prefix = self.nc.new_inbox()
        self._waiting: dict[str, asyncio.Future[bytes]] = {}
        self._tokens = itertools.count()
        self._subscribed: asyncio.Task[None] | None = None

    async def _subscribe(self) -> None:
        await self.nc.subscribe(f"{self.prefix}.*", cb=self._on_reply)

    async def _on_reply(self, msg: Msg) -> None:
        waiting = self._waiting.pop(msg.subject.rsplit(".", 1)[-1], None)
        if waiting is not None and not waiting.done():
            waiting.set_result(msg.data)

    async def expect(self) -> tuple[str, asyncio.Future[bytes]]:
        """A reply subject of its own, and the future its one reply resolves."""
        if self._subscribed is None:
            self._subscribed = asyncio.create_task(self._subscribe())
        try:
            # (shielded: one caller's cancellation must not undo the shared subscription)
            await asyncio.shield(self._subscribed)
        except Exception:
            self._subscribed = None  # the next command tries again
            raise
        token = str(next(self._tokens))
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        return f"{self.prefix}.{token}", future

    def forget(self, reply_to: str) -> None:
        self._waiting.pop(reply_to.rsplit(".", 1)[-1], None)


_replies: weakref.WeakKeyDictionary[EventLog, Replies] = weakref.WeakKeyDictionary()


async def _send_again(
    eventlog: EventLog, subject: str, envelope: Envelope[Any], reply_to: str
) -> None:
    """The same command under a Nats-Msg-Id of its own (see send_and_wait)."""
    again = f"{envelope.id}:again:{uuid.uuid4()}"
    await eventlog.send_command(subject, envelope, reply_to=reply_to, msg_id=again)


def _replies_of(eventlog: EventLog) -> Replies:
    replies = _replies.get(eventlog)
    if replies is None:
        replies = _replies[eventlog] = Replies(eventlog)
    return replies


@dataclass
class AwaitedReply:
    """A sent command's reply, still to come: `future` resolves with its bytes (decode_reply);
    `close` once it is no longer wanted."""

    future: asyncio.Future[bytes]
    replies: Replies
    reply_to: str

    def close(self) -> None:
        self.replies.forget(self.reply_to)


async def send_for_reply(eventlog: EventLog, subject: str, envelope: Envelope[Any]) -> AwaitedReply:
    """Send a command and go on: for a sender that follows the command's effects meanwhile
    (a stream following its run) and still wants to hear a refusal. A command the stream
    already holds is not sent again (its effects are followed as they are)."""
    replies = _replies_of(eventlog)
    reply_to, answered = await replies.expect()
    try:
        await eventlog.send_command(subject, envelope, reply_to=reply_to)
    except BaseException:
        replies.forget(reply_to)
        raise
    return AwaitedReply(answered, replies, reply_to)


async def send_and_wait(
    eventlog: EventLog,
    subject: str,
    envelope: Envelope[Any],
    timeout: float = 30.0,
    resend_every: float | None = None,
) -> Reply:
    """Send a command and wait for its reply.

    The command is durable: if we time out, it is still processed later; the
    caller only loses the answer. A command the stream already holds (the
    same envelope id sent before, by a retry or a resumed run) was answered to
    whoever sent it then; it is sent again under another Nats-Msg-Id so that
    this caller gets an answer too: every handler answers a command it has
    done already from its recorded outcome, without doing it again.

    With `resend_every`, a command still unanswered after that long is sent
    again the same way: if the replica that took it died, another answers now
    instead of after the consumer's ack_wait.
    """
    replies = _replies_of(eventlog)
    reply_to, answered = await replies.expect()
    try:
        sent = await eventlog.send_command(subject, envelope, reply_to=reply_to)
        if sent.duplicate:
            await _send_again(eventlog, subject, envelope, reply_to)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            wait = remaining if resend_every is None else min(resend_every, remaining)
            try:
                data = await asyncio.wait_for(asyncio.shield(answered), max(wait, 0.0))
                return decode_reply(data)
            except TimeoutError as exc:
                if loop.time() >= deadline:
                    raise CommandTimeout(f"no reply to {envelope.type} within {timeout}s") from exc
            await _send_again(eventlog, subject, envelope, reply_to)
    finally:
        replies.forget(reply_to)
