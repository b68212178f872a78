"""The timer: fires every schedule's due slots, each exactly once, whatever the number of
replicas running it and however often they restart.

Correctness comes from the log, slot by slot. For a due schedule the timer reads the last
sequence of the schedule's subject from the log, and decides only if the projection's row
shows exactly that sequence (it has applied everything the subject holds: the slots spent,
the schedule disabled or deleted). It then appends the plan's events (plan.py) with that
sequence expected, each after the one before. A replica that decided on the same state
finds the subject moved and drops its decision; one restarted after a crash, however long
after, reads the spent slots back from the log. Each append also carries an id derived
from the schedule and the slot, so a publish retried after a lost acknowledgement is
deduplicated by the stream; the expected sequence is what holds after the stream's window.
No lock that can expire is involved: `FOR UPDATE SKIP LOCKED` on the due rows only spares
replicas from deciding the same schedules (the loser would conflict, harmlessly).

Between ticks it sleeps until the earliest next slot (at most MAX_SLEEP) and wakes when
the projection in this process applies a schedule event, so a schedule made to fire in a
second fires on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.events import ScheduleFired, ScheduleSlotsSkipped
from o_contracts.ids import derived_id
from o_contracts.schedules import ScheduleSpec
from o_runtime.eventlog import ConcurrencyConflict, EventLog
from o_runtime.outages import is_outage
from o_schedules.plan import Action, Fire, input_messages, plan, run_id, slot_key

log = logging.getLogger(__name__)
PRODUCER = "scheduler"

# Due schedules decided per transaction, and at once.
BATCH = 200
CONCURRENCY = 32
# The longest sleep between ticks (a schedule made or changed in another replica's
# process is seen within this).
MAX_SLEEP = 1.0
# After a tick that found due rows behind the log: the projection is about to apply them.
BEHIND_PAUSE = 0.05
# After a failure: Postgres or NATS away, or one schedule that cannot be decided.
FAILURE_PAUSE = 1.0
# A schedule whose decision failed is left alone this long (one bad row must not spin
# the timer or hold up the others).
FAILED_SCHEDULE_PAUSE = 30.0

# The agents join: a schedule whose agent the registry does not show (deleted, its
# schedules about to go with it) fires nothing.
_DUE = (
    "SELECT s.id, s.agent_id, s.spec, s.after, s.last_seq FROM schedules s"
    " JOIN agents a ON a.id = s.agent_id"
    " WHERE s.enabled AND s.next_due_at <= $1"
    " ORDER BY s.next_due_at LIMIT $2 FOR UPDATE OF s SKIP LOCKED"
)
# The next slot to wake for, among the schedules a tick could decide (not those left alone).
_EARLIEST = (
    "SELECT min(s.next_due_at) FROM schedules s JOIN agents a ON a.id = s.agent_id"
    " WHERE s.enabled AND s.next_due_at IS NOT NULL AND NOT (s.id = ANY($1::text[]))"
)


@dataclass(frozen=True)
class Tick:
    # Schedules that appended something, and those whose row was behind the log.
    advanced: int = 0
    behind: int = 0


def now_utc() -> datetime:
    return datetime.now(UTC)


class Timer:
    def __init__(
        self, eventlog: EventLog, pool: asyncpg.Pool, clock: Callable[[], datetime] = now_utc
    ) -> None:
        self.eventlog = eventlog
        self.pool = pool
        self.clock = clock
        self._poked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Schedules whose decision failed, until when they are left alone (monotonic).
        self._failed: dict[str, float] = {}

    def poke(self) -> None:
        """Look at the due schedules now (a schedule event was applied)."""
        self._poked.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="schedule timer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            self._poked.clear()
            try:
                tick = await self.tick()
                if tick.advanced:
                    continue  # (more may be due than one batch)
                pause = BEHIND_PAUSE if tick.behind else await self._until_next()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if is_outage(exc):
                    log.warning("schedule timer: %r; trying again", exc)
                else:
                    log.exception("schedule timer failed; trying again")
                pause = FAILURE_PAUSE
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), pause)

    async def _until_next(self) -> float:
        left_alone = [k for k, until in self._failed.items() if until > time.monotonic()]
        earliest: datetime | None = await self.pool.fetchval(_EARLIEST, left_alone)
        if earliest is None:
            return MAX_SLEEP
        ahead = (earliest - self.clock()).total_seconds()
        if ahead <= 0:
            # Due already, yet the tick found nothing to decide: another replica has it.
            return BEHIND_PAUSE
        return min(ahead, MAX_SLEEP)

    async def tick(self) -> Tick:
        """Decide every schedule due now (up to BATCH of them)."""
        now = self.clock()
        gate = asyncio.Semaphore(CONCURRENCY)
        async with self.pool.acquire() as conn, conn.transaction():
            rows = [r for r in await conn.fetch(_DUE, now, BATCH) if self._may_decide(r["id"])]
            if not rows:
                return Tick()
            results = await asyncio.gather(*(self._decided(r, now, gate) for r in rows))
        return Tick(sum(1 for n in results if n > 0), sum(1 for n in results if n < 0))

    def _may_decide(self, schedule_id: str) -> bool:
        until = self._failed.get(schedule_id)
        if until is None:
            return True
        if until > time.monotonic():
            return False
        del self._failed[schedule_id]
        return True

    async def _decided(self, row: asyncpg.Record, now: datetime, gate: asyncio.Semaphore) -> int:
        """Events appended for one schedule; -1 if its row is behind the log."""
        async with gate:
            try:
                return await self.decide(row, now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if is_outage(exc):
                    raise
                log.exception("schedule %s: deciding failed; leaving it a while", row["id"])
                self._failed[row["id"]] = time.monotonic() + FAILED_SCHEDULE_PAUSE
                return 0

    async def decide(self, row: asyncpg.Record | dict[str, Any], now: datetime) -> int:
        subject = subjects.schedule_subject(row["id"])
        last = await self.eventlog.last_seq(subject)
        if last != row["last_seq"]:
            return -1
        spec = ScheduleSpec.model_validate(row["spec"])
        appended = 0
        for action in plan(spec, row["after"], now):
            envelope = self.event(row["id"], row["agent_id"], spec, action)
            try:
                last = (await self.eventlog.append(subject, envelope, expected_last_seq=last)).seq
            except ConcurrencyConflict:
                break  # another replica decided it (or the schedule changed): its turn
            appended += 1
        return appended

    @staticmethod
    def event(schedule_id: str, agent_id: str, spec: ScheduleSpec, action: Action) -> Envelope[Any]:
        if isinstance(action, Fire):
            run = run_id(schedule_id, action.slot)
            return Envelope.wrap(
                ScheduleFired(
                    schedule_id=schedule_id,
                    agent_id=agent_id,
                    slot=action.slot,
                    run_id=run,
                    messages=input_messages(spec, run),
                    max_steps=spec.max_steps,
                    late=action.late,
                ),
                aggregate_id=schedule_id,
                producer=PRODUCER,
                id=derived_id("evt", schedule_id, "fired", slot_key(action.slot)),
                correlation_id=run,
            )
        return Envelope.wrap(
            ScheduleSlotsSkipped(
                schedule_id=schedule_id,
                agent_id=agent_id,
                first=action.first,
                last=action.last,
                count=action.count,
                counted_all=action.counted_all,
                reason=f"missed by more than {spec.grace_seconds:g}s (missed: {spec.missed})",
            ),
            aggregate_id=schedule_id,
            producer=PRODUCER,
            id=derived_id("evt", schedule_id, "skipped", slot_key(action.last)),
        )
