"""What a due schedule does now: which slots fire and which are skipped (the missed-slot
policy). Pure: the timer appends what this returns, in order (timer.py).

A schedule's slots up to `after` are spent (fired, skipped, or before it was created or
enabled again). Of the slots after it that are due (at or before now):
- those at most `grace_seconds` old are on time: each fires;
- older ones were missed (no scheduler ran then). The policy says which of them run, late:
  `skip` none, `run_once` the latest, `run_each` the latest `max_catch_up`. The others are
  recorded as skipped, never silently dropped.

Each run's id derives from the schedule and the slot, and its input messages' ids from the
run's: a slot's run is the same whoever fires it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice

from o_contracts.ids import derived_id
from o_contracts.models import ChatMessage
from o_contracts.schedules import ScheduleSpec
from o_schedules.slots import Slots

# Actions one decision appends at most (the rest at the next tick: a per-second schedule
# that missed a day does not hold the timer for 86,400 appends).
MAX_ACTIONS = 100
# Skipped slots are counted up to this many (a per-second schedule down for a week would
# take seconds to count); past it the skip says it did not count them all.
COUNT_LIMIT = 10_000


@dataclass(frozen=True)
class Fire:
    slot: datetime
    # A missed slot run late by the policy.
    late: bool = False


@dataclass(frozen=True)
class Skip:
    first: datetime
    last: datetime
    count: int
    counted_all: bool = True


Action = Fire | Skip


def kept(spec: ScheduleSpec) -> int:
    """How many of the missed slots run."""
    return {"skip": 0, "run_once": 1, "run_each": spec.max_catch_up}[spec.missed]


def plan(
    spec: ScheduleSpec, after: datetime, now: datetime, limit: int = MAX_ACTIONS
) -> list[Action]:
    """The actions due at `now` for a schedule whose slots up to `after` are spent."""
    slots = Slots(spec)
    first = slots.next_after(after)
    if first is None or first > now:
        return []
    actions: list[Action] = []
    cursor = after
    cutoff = now - timedelta(seconds=spec.grace_seconds)
    if first <= cutoff:
        keep = kept(spec)
        # The latest missed slots, latest first: those kept, then the last one skipped.
        recent = [s for s in islice(slots.at_or_before(cutoff), keep + 1) if s > after]
        run = sorted(recent[:keep])
        if len(recent) > keep:
            count, counted_all = _count(slots, after, recent[keep])
            actions.append(Skip(first, recent[keep], count, counted_all))
        actions += [Fire(s, late=True) for s in run]
        cursor = recent[0]
    for slot in slots.after(cursor):
        if slot > now or len(actions) >= limit:
            break
        actions.append(Fire(slot))
    return actions[:limit]


def _count(slots: Slots, after: datetime, last: datetime) -> tuple[int, bool]:
    count = 0
    for slot in slots.after(after):
        if slot > last:
            return count, True
        count += 1
        if count >= COUNT_LIMIT:
            return count, slot == last
    return count, True


def slot_key(slot: datetime) -> str:
    """The slot as ids derive from it (UTC, ISO 8601, microseconds when it has any)."""
    return slot.astimezone(UTC).isoformat()


def run_id(schedule_id: str, slot: datetime) -> str:
    return derived_id("run", schedule_id, slot_key(slot))


def input_messages(spec: ScheduleSpec, run: str) -> list[ChatMessage]:
    """The run's input: the schedule's messages, with ids derived from the run's (as a
    request retried with an idempotency key: o_gateway/idempotency.py)."""
    return [
        m.message(derived_id("message", run, "input", str(i))) for i, m in enumerate(spec.messages)
    ]
