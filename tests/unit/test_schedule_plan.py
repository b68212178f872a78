"""What a due schedule does (o_schedules/plan.py): on-time slots fire; slots missed while
no scheduler ran follow the schedule's policy (skip, run once, run each up to a limit), the
rest recorded as skipped; ids derive from schedule and slot."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from o_contracts.schedules import ScheduleChanges, ScheduledMessage, ScheduleSpec
from o_schedules.plan import COUNT_LIMIT, Fire, Skip, input_messages, plan, run_id, slot_key

NOON = datetime(2026, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC)


def every_second(**extra: Any) -> ScheduleSpec:
    return ScheduleSpec(cron="* * * * * *", messages=[ScheduledMessage(content="tick")], **extra)


def second(n: int) -> datetime:
    """NOON's whole second, n seconds on (negative: before)."""
    return NOON.replace(microsecond=0) + timedelta(seconds=n)


def test_nothing_is_due_before_the_first_slot() -> None:
    assert plan(every_second(), NOON, NOON + timedelta(milliseconds=400)) == []


def test_each_on_time_slot_fires_once_in_order() -> None:
    actions = plan(every_second(grace_seconds=60), NOON - timedelta(seconds=3), NOON)
    assert actions == [Fire(second(-2)), Fire(second(-1)), Fire(second(0))]


def test_missed_slots_run_once_by_default_and_the_rest_are_skipped() -> None:
    spec = every_second(grace_seconds=10)
    actions = plan(spec, NOON - timedelta(seconds=30), NOON)
    # Missed: -29 .. -10 (over 10 s late at NOON, half a second past 0); on time: -9 .. 0.
    assert actions == [
        Skip(second(-29), second(-11), 19),
        Fire(second(-10), late=True),
        *[Fire(second(n)) for n in range(-9, 1)],
    ]


def test_the_skip_policy_runs_no_missed_slot() -> None:
    spec = every_second(grace_seconds=10, missed="skip")
    actions = plan(spec, NOON - timedelta(seconds=30), NOON)
    assert actions[0] == Skip(second(-29), second(-10), 20)
    assert actions[1:] == [Fire(second(n)) for n in range(-9, 1)]


def test_run_each_runs_the_latest_missed_slots_up_to_its_limit() -> None:
    spec = every_second(grace_seconds=10, missed="run_each", max_catch_up=3)
    actions = plan(spec, NOON - timedelta(seconds=30), NOON)
    assert actions[:4] == [
        Skip(second(-29), second(-13), 17),
        Fire(second(-12), late=True),
        Fire(second(-11), late=True),
        Fire(second(-10), late=True),
    ]
    assert actions[4:] == [Fire(second(n)) for n in range(-9, 1)]


def test_run_each_within_its_limit_skips_nothing() -> None:
    spec = every_second(grace_seconds=10, missed="run_each", max_catch_up=50)
    actions = plan(spec, NOON - timedelta(seconds=30), NOON)
    assert actions == [Fire(second(n), late=n <= -10) for n in range(-29, 1)]


def test_a_missed_one_shot_runs_late_or_is_skipped_by_policy() -> None:
    at = NOON - timedelta(hours=1)
    message = [ScheduledMessage(content="wake up")]
    late = plan(ScheduleSpec(at=at, messages=message), at - timedelta(days=1), NOON)
    assert late == [Fire(at, late=True)]
    skipped = ScheduleSpec(at=at, messages=message, missed="skip")
    assert plan(skipped, at - timedelta(days=1), NOON) == [Skip(at, at, 1)]
    assert plan(skipped, at, NOON) == []  # (spent: nothing more, ever)


def test_a_long_outage_is_decided_a_bounded_piece_at_a_time() -> None:
    spec = every_second(grace_seconds=3600, missed="run_each", max_catch_up=1000)
    after = NOON - timedelta(days=7)
    actions = plan(spec, after, NOON, limit=5)
    # Seven days of per-second slots: most are skipped, counted up to the limit.
    # (The latest missed slot is an hour before NOON; the thousand before it run.)
    assert actions[0] == Skip(after + timedelta(seconds=0.5), second(-4600), COUNT_LIMIT, False)
    assert actions[1:] == [Fire(second(n), late=True) for n in range(-4599, -4595)]
    # The next decision goes on from the last one taken.
    following = plan(spec, second(-4596), NOON, limit=3)
    assert following == [Fire(second(n), late=True) for n in range(-4595, -4592)]


def test_a_slot_run_is_named_by_schedule_and_slot() -> None:
    slot = datetime(2026, 1, 1, 13, 0, tzinfo=UTC) + timedelta(hours=1)
    assert slot_key(slot) == "2026-01-01T14:00:00+00:00"
    assert run_id("schedule-a", slot) == run_id("schedule-a", slot.astimezone())
    assert run_id("schedule-a", slot) != run_id("schedule-b", slot)
    assert run_id("schedule-a", slot) != run_id("schedule-a", slot + timedelta(seconds=1))
    messages = input_messages(every_second(), run_id("schedule-a", slot))
    assert [m.content for m in messages] == ["tick"]
    assert messages == input_messages(every_second(), run_id("schedule-a", slot))


def test_changes_replace_only_what_they_give_and_cron_and_at_exclude_each_other() -> None:
    spec = every_second(name="pulse", grace_seconds=5)
    at = datetime(2030, 1, 1, tzinfo=UTC)
    moved = ScheduleChanges(at=at).applied_to(spec)
    assert (moved.cron, moved.at, moved.name, moved.grace_seconds) == (None, at, "pulse", 5)
    back = ScheduleChanges(cron="0 7 * * *", missed="skip").applied_to(moved)
    assert (back.cron, back.at, back.missed) == ("0 7 * * *", None, "skip")
    assert ScheduleChanges(enabled=False).applied_to(spec) == spec
