"""A delivery's state, folded from its subject's events, and what comes next. Pure.

The log holds the whole delivery (o.evt.callback.<run_id>): CallbackScheduled, then
one CallbackAttempted per attempt, then CallbackDelivered or CallbackAbandoned.
Whoever handles the delivery next folds those and asks `next_step`: nothing (it is
over), wait (the next attempt is not due), conclude (an outcome decided but not yet
recorded: a crash came between the two appends), or attempt number n. After an
attempt, `recorded` says which events record it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from o_contracts.base import Message
from o_contracts.events import (
    CallbackAbandoned,
    CallbackAttempted,
    CallbackDelivered,
    CallbackScheduled,
)


@dataclass(frozen=True)
class Backoff:
    """Attempt n+1 waits initial * 2^(n-1) seconds after attempt n, at most max_delay."""

    initial: float
    max_delay: float

    def after(self, attempt: int) -> float:
        return min(self.initial * 2.0 ** min(attempt - 1, 60), self.max_delay)


@dataclass(frozen=True)
class DeliveryState:
    scheduled: CallbackScheduled | None = None
    attempts: int = 0
    last: CallbackAttempted | None = None
    outcome: CallbackDelivered | CallbackAbandoned | None = None
    # The subject's last sequence: the next append expects it.
    last_seq: int = 0


def fold(events: Iterable[tuple[int, Message]]) -> DeliveryState:
    """The delivery as its events `(seq, event)`, in log order, leave it."""
    d = DeliveryState()
    for seq, e in events:
        if isinstance(e, CallbackScheduled):
            d = DeliveryState(scheduled=e, last_seq=seq)
        elif isinstance(e, CallbackAttempted):
            d = DeliveryState(d.scheduled, max(d.attempts, e.attempt), e, d.outcome, seq)
        elif isinstance(e, CallbackDelivered | CallbackAbandoned):
            d = DeliveryState(d.scheduled, d.attempts, d.last, e, seq)
        else:
            d = DeliveryState(d.scheduled, d.attempts, d.last, d.outcome, seq)
    return d


@dataclass(frozen=True)
class Finished:
    outcome: CallbackDelivered | CallbackAbandoned


@dataclass(frozen=True)
class Wait:
    seconds: float


@dataclass(frozen=True)
class Conclude:
    """Record this outcome; nothing is sent."""

    event: CallbackDelivered | CallbackAbandoned


@dataclass(frozen=True)
class Attempt:
    number: int


Step = Finished | Wait | Conclude | Attempt


def acknowledged(status_code: int | None) -> bool:
    return status_code is not None and 200 <= status_code < 300


def next_step(d: DeliveryState, now: datetime) -> Step:
    scheduled = d.scheduled
    assert scheduled is not None, "a delivery is scheduled before anything else"
    if d.outcome is not None:
        return Finished(d.outcome)
    last = d.last
    if last is not None and acknowledged(last.status_code):
        assert last.status_code is not None
        return Conclude(
            CallbackDelivered(
                run_id=scheduled.run_id,
                delivery_id=scheduled.delivery_id,
                attempt=last.attempt,
                status_code=last.status_code,
            )
        )
    if last is not None and last.next_attempt_at is None:
        return Conclude(abandoned(d, last.error or f"the receiver answered {last.status_code}"))
    due = last.next_attempt_at if last is not None else None
    if due is not None and due > now:
        return Wait((due - now).total_seconds())
    if now > scheduled.deadline and d.attempts > 0:
        # (A gateway down past the deadline: the attempts it owed are not made now.)
        return Conclude(abandoned(d, "no attempt succeeded before the deadline"))
    return Attempt(d.attempts + 1)


def abandoned(d: DeliveryState, reason: str) -> CallbackAbandoned:
    assert d.scheduled is not None
    return CallbackAbandoned(
        run_id=d.scheduled.run_id,
        delivery_id=d.scheduled.delivery_id,
        attempts=d.attempts,
        reason=reason,
    )


@dataclass(frozen=True)
class Outcome:
    """What one POST came to."""

    sent_at: datetime
    status_code: int | None = None
    error: str | None = None
    # The target is refused by policy: trying again would not change that.
    refused: bool = False


def recorded(
    d: DeliveryState, number: int, outcome: Outcome, now: datetime, backoff: Backoff
) -> list[CallbackAttempted | CallbackDelivered | CallbackAbandoned]:
    """The events that record attempt `number`: the attempt, and its conclusion if it is
    the last (acknowledged, or no time left for another). A refused target was not
    sent anything: only the delivery's abandonment is recorded."""
    scheduled = d.scheduled
    assert scheduled is not None
    if outcome.refused:
        # Nothing was sent: no attempt to record, and none will follow.
        return [abandoned(d, f"refused: {outcome.error}")]
    ok = acknowledged(outcome.status_code)
    due: datetime | None = None
    if not ok:
        due = now + timedelta(seconds=backoff.after(number))
        if due > scheduled.deadline:
            due = None
    attempt = CallbackAttempted(
        run_id=scheduled.run_id,
        delivery_id=scheduled.delivery_id,
        attempt=number,
        sent_at=outcome.sent_at,
        status_code=outcome.status_code,
        error=outcome.error,
        next_attempt_at=due,
    )
    done = DeliveryState(scheduled, number, attempt, None, d.last_seq)
    if ok:
        assert outcome.status_code is not None
        return [
            attempt,
            CallbackDelivered(
                run_id=scheduled.run_id,
                delivery_id=scheduled.delivery_id,
                attempt=number,
                status_code=outcome.status_code,
            ),
        ]
    if due is None:
        last = outcome.error or f"the receiver answered {outcome.status_code}"
        reason = f"gave up after {number} attempts (the last: {last})"
        return [attempt, abandoned(done, reason)]
    return [attempt]
