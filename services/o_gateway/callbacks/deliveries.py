"""DeliverCallback: a run's callback, one attempt at a time, each recorded before the next.

The delivery's state is its subject in the log (o.evt.callback.<run_id>), read
afresh on every delivery of the command; every append expects the subject's
last sequence, so of two handlers racing (a command redelivered while its first
holder still works) one records and the other reads what it recorded. Hence,
whatever is killed when:

- before CallbackScheduled: the command comes again and schedules it;
- during a POST: nothing of that attempt is recorded, the command comes again
  (after the consumer's ack_wait) and the attempt is made again with the same
  delivery id: a receiver may see that delivery id once more, never none;
- after a 2xx is recorded: it is never sent again.

Retries are the same command delivered again after a delay (`Deferred`: the
consumer naks it with the backoff, so no process holds it meanwhile).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from o_contracts import subjects
from o_contracts.base import Reply
from o_contracts.commands import DeliverCallback
from o_contracts.envelope import Envelope
from o_contracts.events import (
    CallbackAbandoned,
    CallbackAttempted,
    CallbackDelivered,
    CallbackScheduled,
)
from o_contracts.ids import derived_id
from o_contracts.projection_names import RUNS
from o_gateway import render
from o_gateway.callbacks import payload, sender
from o_gateway.callbacks.schedule import (
    Attempt,
    Backoff,
    Conclude,
    DeliveryState,
    Finished,
    Outcome,
    Wait,
    fold,
    next_step,
    recorded,
)
from o_gateway.callbacks.settings import SECRET_ENV, CallbackSettings
from o_gateway.callbacks.signing import signed_headers
from o_gateway.conversation_reads import rendered_messages
from o_gateway.state import Gateway
from o_runtime.commands import Deferred, Delivery
from o_runtime.eventlog import ConcurrencyConflict

log = logging.getLogger(__name__)
PRODUCER = "gateway"
# How long the body waits for the runs projection to show the run's end.
PROJECTION_WAIT = 30.0

_RUN = "SELECT * FROM runs WHERE id = $1"
_MESSAGES = (
    "SELECT body, created_at, run_id, step_id, conversation_id FROM messages"
    f" WHERE run_id = $1 ORDER BY seq LIMIT {payload.MAX_MESSAGES}"
)
_AGENT_TYPE = "SELECT agent_type FROM agents WHERE id = $1"

Recording = CallbackAttempted | CallbackDelivered | CallbackAbandoned


def delivery_id(run_id: str) -> str:
    return derived_id("callback", run_id)


def event_id(e: Recording | CallbackScheduled) -> str:
    """The same event of the same delivery gets the same id on every replica and retry."""
    if isinstance(e, CallbackAttempted):
        return derived_id("evt", e.delivery_id, "attempt", str(e.attempt))
    return derived_id("evt", e.delivery_id, type(e).__name__)


@dataclass
class CallbackDeliveries:
    gw: Gateway

    @property
    def settings(self) -> CallbackSettings:
        return self.gw.settings.callbacks

    async def deliver(self, envelope: Envelope[Any], _: Delivery) -> Reply:
        cmd = envelope.data
        assert isinstance(cmd, DeliverCallback)
        subject = subjects.callback_subject(cmd.run_id)
        state = await self.state(subject)
        if state.scheduled is None:
            if not await self.schedule(envelope):
                return Reply(ok=False, status=404, error=f"run {cmd.run_id} has no callback")
            state = await self.state(subject)
        while True:
            step = next_step(state, now())
            if isinstance(step, Finished):
                return Reply(ok=True, seq=state.last_seq, result=_result(step.outcome))
            if isinstance(step, Wait):
                raise Deferred(step.seconds)
            if isinstance(step, Conclude):
                await self.record(subject, envelope, state, [step.event])
            elif isinstance(step, Attempt):
                outcome = await self.attempt(state, step.number)
                backoff = Backoff(self.settings.retry_initial, self.settings.retry_max_delay)
                events = recorded(state, step.number, outcome, now(), backoff)
                await self.record(subject, envelope, state, events)
            state = await self.state(subject)

    async def state(self, subject: str) -> DeliveryState:
        return fold((r.seq, r.envelope.data) for r in await self.gw.eventlog.read_subject(subject))

    async def schedule(self, command: Envelope[Any]) -> bool:
        """Append the delivery with its body, from the run as of its end; False if the run
        has no callback (a command from outside naming another run)."""
        cmd = command.data
        assert isinstance(cmd, DeliverCallback)
        async with self.gw.reads.at(cmd.completed_seq, RUNS, timeout=PROJECTION_WAIT) as conn:
            run = await conn.fetchrow(_RUN, cmd.run_id)
            if run is None or run["callback_url"] is None or run["stop_reason"] is None:
                return False
            rows = await conn.fetch(_MESSAGES, cmd.run_id)
            agent_type = await conn.fetchval(_AGENT_TYPE, run["agent_id"])
        config = run["request_config"] or {}
        messages = await rendered_messages(
            self.gw, rows, agent_type or "letta_v1_agent", render.AssistantView.of(config)
        )
        wanted = config.get("include_return_message_types")
        if wanted:
            # (As Letta's run messages: only the types the request asked for.)
            messages = [m for m in messages if m.get("message_type") in wanted]
        completed_at: datetime = run["completed_at"]
        scheduled = CallbackScheduled(
            run_id=cmd.run_id,
            agent_id=run["agent_id"],
            delivery_id=delivery_id(cmd.run_id),
            url=run["callback_url"],
            body=payload.body(dict(run), messages),
            deadline=completed_at + timedelta(seconds=self.settings.retry_for),
        )
        try:
            await self.gw.eventlog.append(
                subjects.callback_subject(cmd.run_id),
                command.caused(
                    scheduled, aggregate_id=cmd.run_id, producer=PRODUCER, id=event_id(scheduled)
                ),
                expected_last_seq=0,
            )
        except ConcurrencyConflict:
            pass  # (scheduled by another handler of the same command meanwhile)
        return True

    async def attempt(self, state: DeliveryState, number: int) -> Outcome:
        scheduled = state.scheduled
        assert scheduled is not None
        secret = self.settings.secret
        if secret is None:
            return Outcome(
                now(), error=f"this server has no {SECRET_ENV} to sign with", refused=True
            )
        body = scheduled.body.encode()

        def headers() -> dict[str, str]:
            return signed_headers(secret, scheduled.delivery_id, number, int(time.time()), body)

        outcome = await sender.post(
            scheduled.url,
            body,
            headers,
            self.settings.targets,
            self.settings.timeout,
            self.settings.max_response_bytes,
        )
        log.info(
            "callback of run %s, attempt %d: %s",
            scheduled.run_id,
            number,
            outcome.status_code if outcome.status_code is not None else outcome.error,
        )
        return outcome

    async def record(
        self,
        subject: str,
        command: Envelope[Any],
        state: DeliveryState,
        events: list[Recording],
    ) -> None:
        """Append `events` in order after the state's last event; another handler that got
        there first wins (its record is read back, this one's dropped)."""
        expected = state.last_seq
        for e in events:
            envelope = command.caused(e, aggregate_id=e.run_id, producer=PRODUCER, id=event_id(e))
            try:
                appended = await self.gw.eventlog.append(subject, envelope, expected)
            except ConcurrencyConflict:
                return
            expected = appended.seq


def now() -> datetime:
    return datetime.now(UTC)


def _result(outcome: CallbackDelivered | CallbackAbandoned) -> dict[str, Any]:
    if isinstance(outcome, CallbackDelivered):
        return {"state": "delivered", "status_code": outcome.status_code}
    return {"state": "abandoned", "reason": outcome.reason}
