"""The gateway's read model of completion callbacks (projection "callbacks").

One row per run that asked for a callback: where its delivery stands and what
Letta's Run shows of it: `callback_sent_at` (the last attempt's time),
`callback_status_code` (the receiver's status then) and `callback_error` (the
last attempt's error, or why the delivery was abandoned).
"""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    CallbackAbandoned,
    CallbackAttempted,
    CallbackDelivered,
    CallbackScheduled,
)
from o_contracts.projection_names import CALLBACKS
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection

callbacks = Projection(
    name=CALLBACKS, filter_subject=subjects.CALLBACK_EVENTS, tables=["run_callbacks"]
)


@callbacks.on(CallbackScheduled)
async def callback_scheduled(conn: asyncpg.Connection, e: CallbackScheduled, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO run_callbacks (run_id, agent_id, delivery_id, url, state, deadline,"
        " scheduled_at, last_seq) VALUES ($1, $2, $3, $4, 'scheduled', $5, $6, $7)"
        " ON CONFLICT (run_id) DO NOTHING",
        e.run_id,
        e.agent_id,
        e.delivery_id,
        e.url,
        e.deadline,
        rec.envelope.time,
        rec.seq,
    )


@callbacks.on(CallbackAttempted)
async def callback_attempted(conn: asyncpg.Connection, e: CallbackAttempted, rec: Recorded) -> None:
    await conn.execute(
        "UPDATE run_callbacks SET attempts = greatest(attempts, $2), callback_sent_at = $3,"
        " callback_status_code = $4, callback_error = $5, next_attempt_at = $6, last_seq = $7"
        " WHERE run_id = $1",
        e.run_id,
        e.attempt,
        e.sent_at,
        e.status_code,
        e.error,
        e.next_attempt_at,
        rec.seq,
    )


@callbacks.on(CallbackDelivered)
async def callback_delivered(conn: asyncpg.Connection, e: CallbackDelivered, rec: Recorded) -> None:
    await conn.execute(
        "UPDATE run_callbacks SET state = 'delivered', callback_status_code = $2,"
        " callback_error = NULL, next_attempt_at = NULL, last_seq = $3 WHERE run_id = $1",
        e.run_id,
        e.status_code,
        rec.seq,
    )


@callbacks.on(CallbackAbandoned)
async def callback_abandoned(conn: asyncpg.Connection, e: CallbackAbandoned, rec: Recorded) -> None:
    await conn.execute(
        "UPDATE run_callbacks SET state = 'abandoned', callback_error = $2,"
        " next_attempt_at = NULL, last_seq = $3 WHERE run_id = $1",
        e.run_id,
        e.reason,
        rec.seq,
    )
