"""A delivery's next step from its recorded events: attempt, wait, conclude or nothing.

Given the events on o.evt.callback.<run_id>, when an attempt ends, then the events that
record it: no servers involved.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from o_contracts.events import (
    CallbackAbandoned,
    CallbackAttempted,
    CallbackDelivered,
    CallbackScheduled,
)
from o_gateway.callbacks.schedule import (
    Attempt,
    Backoff,
    Conclude,
    Finished,
    Outcome,
    Wait,
    fold,
    next_step,
    recorded,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
BACKOFF = Backoff(initial=1.0, max_delay=8.0)
SCHEDULED = CallbackScheduled(
    run_id="run-1",
    agent_id="agent-1",
    delivery_id="callback-1",
    url="https://hooks.example.com/o",
    body="{}",
    deadline=T0 + timedelta(seconds=30),
)


def attempted(n: int, at: datetime, status: int | None, due: datetime | None) -> CallbackAttempted:
    return CallbackAttempted(
        run_id="run-1",
        delivery_id="callback-1",
        attempt=n,
        sent_at=at,
        status_code=status,
        error=None if status else "ConnectError: refused",
        next_attempt_at=due,
    )


def test_a_scheduled_delivery_is_attempted_at_once() -> None:
    assert next_step(fold([(1, SCHEDULED)]), T0) == Attempt(1)


def test_the_backoff_doubles_up_to_its_longest() -> None:
    assert [BACKOFF.after(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_a_failed_attempt_is_recorded_with_the_time_of_the_next() -> None:
    d = fold([(1, SCHEDULED)])
    events = recorded(d, 1, Outcome(T0, status_code=500), T0, BACKOFF)
    assert events == [attempted(1, T0, 500, T0 + timedelta(seconds=1))]
    assert events[0].error is None


def test_the_next_attempt_waits_until_it_is_due() -> None:
    d = fold([(1, SCHEDULED), (2, attempted(1, T0, 500, T0 + timedelta(seconds=2)))])
    assert next_step(d, T0 + timedelta(seconds=0.5)) == Wait(1.5)
    assert next_step(d, T0 + timedelta(seconds=2)) == Attempt(2)


def test_a_2xx_is_recorded_as_delivered_and_nothing_follows() -> None:
    d = fold([(1, SCHEDULED), (2, attempted(1, T0, 500, T0 + timedelta(seconds=1)))])
    events = recorded(d, 2, Outcome(T0, status_code=204), T0, BACKOFF)
    assert events == [
        attempted(2, T0, 204, None),
        CallbackDelivered(run_id="run-1", delivery_id="callback-1", attempt=2, status_code=204),
    ]
    done = fold([(1, SCHEDULED), (2, events[0]), (3, events[1])])
    assert next_step(done, T0 + timedelta(days=1)) == Finished(events[1])  # type: ignore[arg-type]


def test_a_2xx_recorded_without_its_conclusion_is_concluded_not_sent_again() -> None:
    # (A crash came between the attempt's record and the delivery's.)
    d = fold([(1, SCHEDULED), (2, attempted(1, T0, 200, None))])
    assert next_step(d, T0) == Conclude(
        CallbackDelivered(run_id="run-1", delivery_id="callback-1", attempt=1, status_code=200)
    )


def test_an_attempt_cut_by_a_crash_is_made_again_under_its_number() -> None:
    # Nothing of attempt 2 was recorded: the next handler makes attempt 2.
    d = fold([(1, SCHEDULED), (2, attempted(1, T0, 503, T0 + timedelta(seconds=1)))])
    assert next_step(d, T0 + timedelta(seconds=5)) == Attempt(2)


def test_no_attempt_is_due_after_the_deadline() -> None:
    d = fold([(1, SCHEDULED)])
    late = T0 + timedelta(seconds=29)
    # 8 s more would pass the deadline (30 s): this attempt is the last.
    events = recorded(d, 4, Outcome(late, status_code=502), late, BACKOFF)
    assert events == [
        attempted(4, late, 502, None),
        CallbackAbandoned(
            run_id="run-1",
            delivery_id="callback-1",
            attempts=4,
            reason="gave up after 4 attempts (the last: the receiver answered 502)",
        ),
    ]


def test_a_gateway_down_past_the_deadline_abandons_what_it_owed() -> None:
    d = fold([(1, SCHEDULED), (2, attempted(1, T0, None, T0 + timedelta(seconds=1)))])
    assert next_step(d, T0 + timedelta(minutes=5)) == Conclude(
        CallbackAbandoned(
            run_id="run-1",
            delivery_id="callback-1",
            attempts=1,
            reason="no attempt succeeded before the deadline",
        )
    )


def test_a_refused_target_is_abandoned_without_an_attempt() -> None:
    d = fold([(1, SCHEDULED)])
    outcome = Outcome(T0, error="10.0.0.1 is private, not a public address", refused=True)
    assert recorded(d, 1, outcome, T0, BACKOFF) == [
        CallbackAbandoned(
            run_id="run-1",
            delivery_id="callback-1",
            attempts=0,
            reason="refused: 10.0.0.1 is private, not a public address",
        )
    ]


def test_a_delivery_abandoned_stays_so() -> None:
    gone = CallbackAbandoned(run_id="run-1", delivery_id="callback-1", attempts=0, reason="x")
    assert next_step(fold([(1, SCHEDULED), (2, gone)]), T0) == Finished(gone)


def test_the_fold_keeps_the_last_sequence_for_the_next_append() -> None:
    d = fold([(7, SCHEDULED), (12, attempted(1, T0, 500, T0 + timedelta(seconds=1)))])
    assert (d.last_seq, d.attempts) == (12, 1)
