"""The schedules' read model (projection "schedules", hosted by the scheduler's process):
each schedule with its next slot, the slots it fired and the changes it took.

Every event on a schedule's subject sets the row's `last_seq`, so the timer can tell
whether the row shows the subject as the log has it before deciding on it. The next slot
is computed here from the spec (slots.py: pinned croniter and tzdata), so a rebuild from
the log gives the same rows.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
    ScheduleSlotsSkipped,
    ScheduleUpdated,
)
from o_contracts.projection_names import SCHEDULES
from o_contracts.schedules import ScheduleSpec
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection
from o_schedules.slots import Slots

schedules = Projection(
    name=SCHEDULES,
    filter_subject=subjects.SCHEDULE_EVENTS,
    tables=["schedules", "schedule_fires", "schedule_commands"],
)


def next_due(spec: ScheduleSpec, after: datetime) -> datetime | None:
    return Slots(spec).next_after(after)


@schedules.on(ScheduleCreated)
async def created(conn: asyncpg.Connection, e: ScheduleCreated, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO schedules (id, agent_id, spec, enabled, after, next_due_at, created_at,"
        " updated_at, last_seq) VALUES ($1,$2,$3,$4,$5,$6,$7,$7,$8) ON CONFLICT DO NOTHING",
        e.schedule_id,
        e.agent_id,
        e.spec.model_dump(mode="json"),
        e.enabled,
        e.after,
        next_due(e.spec, e.after),
        rec.envelope.time,
        rec.seq,
    )


@schedules.on(ScheduleUpdated)
async def updated(conn: asyncpg.Connection, e: ScheduleUpdated, rec: Recorded) -> None:
    after = e.after
    if after is None:
        after = await conn.fetchval("SELECT after FROM schedules WHERE id = $1", e.schedule_id)
        if after is None:
            return  # (deleted meanwhile: nothing left to change)
    await conn.execute(
        "UPDATE schedules SET spec = $2, enabled = $3, after = $4, next_due_at = $5,"
        " updated_at = $6, last_seq = $7 WHERE id = $1",
        e.schedule_id,
        e.spec.model_dump(mode="json"),
        e.enabled,
        after,
        next_due(e.spec, after),
        rec.envelope.time,
        rec.seq,
    )
    if rec.envelope.causation_id is not None:
        await conn.execute(
            "INSERT INTO schedule_commands (command_id, schedule_id, seq) VALUES ($1, $2, $3)"
            " ON CONFLICT DO NOTHING",
            rec.envelope.causation_id,
            e.schedule_id,
            rec.seq,
        )


async def _spent(
    conn: asyncpg.Connection,
    schedule_id: str,
    through: datetime,
    rec: Recorded,
    *,
    fires: int = 0,
    skipped: int = 0,
    run_id: str | None = None,
) -> None:
    """The schedule's slots up to `through` are spent (`run_id`: the run the last started)."""
    raw = await conn.fetchval("SELECT spec FROM schedules WHERE id = $1", schedule_id)
    if raw is None:
        return
    spec = ScheduleSpec.model_validate(raw)
    await conn.execute(
        "UPDATE schedules SET after = $2, next_due_at = $3, fires = fires + $4,"
        " skipped = skipped + $5, updated_at = $6, last_seq = $7,"
        " last_slot = CASE WHEN $8::text IS NULL THEN last_slot ELSE $2 END,"
        " last_run_id = coalesce($8, last_run_id) WHERE id = $1",
        schedule_id,
        through,
        next_due(spec, through),
        fires,
        skipped,
        rec.envelope.time,
        rec.seq,
        run_id,
    )


@schedules.on(ScheduleFired)
async def fired(conn: asyncpg.Connection, e: ScheduleFired, rec: Recorded) -> None:
    inserted = await conn.fetchval(
        "INSERT INTO schedule_fires (schedule_id, slot, run_id, agent_id, late, fired_at, seq)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7) ON CONFLICT DO NOTHING RETURNING 1",
        e.schedule_id,
        e.slot,
        e.run_id,
        e.agent_id,
        e.late,
        rec.envelope.time,
        rec.seq,
    )
    await _spent(conn, e.schedule_id, e.slot, rec, fires=1 if inserted else 0, run_id=e.run_id)


@schedules.on(ScheduleSlotsSkipped)
async def skipped(conn: asyncpg.Connection, e: ScheduleSlotsSkipped, rec: Recorded) -> None:
    await _spent(conn, e.schedule_id, e.last, rec, skipped=e.count)


@schedules.on(ScheduleDeleted)
async def deleted(conn: asyncpg.Connection, e: ScheduleDeleted, rec: Recorded) -> None:
    # The log keeps its history; the runs it started stay the agent's.
    for table, key in (
        ("schedules", "id"),
        ("schedule_fires", "schedule_id"),
        ("schedule_commands", "schedule_id"),
    ):
        await conn.execute(f"DELETE FROM {table} WHERE {key} = $1", e.schedule_id)
