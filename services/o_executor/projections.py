"""The executor's read model: every message of every conversation, and runs."""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    ContextSummarized,
    LLMResponded,
    RunCancellationRequested,
    RunCompleted,
    RunQueued,
    RunStarted,
    ToolReturned,
)
from o_contracts.models import ChatMessage
from o_contracts.ordering import before, position
from o_contracts.projection_names import RUNS
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection

runs = Projection(
    name=RUNS,
    filter_subject=subjects.AGENT_EVENTS,
    tables=["messages", "runs", "steps", "pending_approvals"],
)

# Letta's run status for each stop reason; anything else is a failure.
_COMPLETED = {"end_turn", "max_steps", "tool_rule", "requires_approval", "no_tool_call"}


async def _insert_message(
    conn: asyncpg.Connection,
    rec: Recorded,
    agent_id: str,
    run_id: str,
    step_id: str | None,
    message: ChatMessage,
    offset: int = 0,
) -> None:
    await conn.execute(
        "INSERT INTO messages (id, agent_id, run_id, step_id, role, body, seq, created_at)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT (id) DO NOTHING",
        message.id,
        agent_id,
        run_id,
        step_id,
        message.role,
        message.model_dump(mode="json", exclude_none=True),
        # Several messages from one event keep their order within the event.
        position(rec.seq, offset),
        rec.envelope.time,
    )


@runs.on(RunQueued)
async def run_queued(conn: asyncpg.Connection, e: RunQueued, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO runs (id, agent_id, status, created_at, last_seq, background, request_config)"
        " VALUES ($1, $2, 'created', $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
        e.run_id,
        e.agent_id,
        rec.envelope.time,
        rec.seq,
        e.background,
        e.request_config,
    )


_RUN_STARTED = (
    "INSERT INTO runs (id, agent_id, status, created_at, last_seq, started_seq, background,"
    " request_config) VALUES ($1, $2, 'running', $3, $4, $4, $5, $6)"
    " ON CONFLICT (id) DO UPDATE SET status = 'running', last_seq = $4, started_seq = $4"
    " WHERE runs.status = 'created'"
)


@runs.on(RunStarted)
async def run_started(conn: asyncpg.Connection, e: RunStarted, rec: Recorded) -> None:
    args = (e.run_id, e.agent_id, rec.envelope.time, rec.seq, e.background, e.request_config)
    if len(e.messages) != 1:
        await conn.execute(_RUN_STARTED, *args)
        for i, m in enumerate(e.messages):
            await _insert_message(conn, rec, e.agent_id, e.run_id, None, m, i)
        return
    # The usual run: one input message, with the run in one statement (one round trip).
    message = e.messages[0]
    await conn.execute(
        f"WITH run AS ({_RUN_STARTED})"
        " INSERT INTO messages (id, agent_id, run_id, step_id, role, body, seq, created_at)"
        " VALUES ($7, $2, $1, NULL, $8, $9, $10, $3) ON CONFLICT (id) DO NOTHING",
        *args,
        message.id,
        message.role,
        message.model_dump(mode="json", exclude_none=True),
        position(rec.seq),
    )


@runs.on(LLMResponded)
async def llm_responded(conn: asyncpg.Connection, e: LLMResponded, rec: Recorded) -> None:
    # Every step has one: the message, the run's step count and the step row
    # in one statement (one round trip; the run's reply waits for this projection).
    await conn.execute(
        "WITH message AS ("
        " INSERT INTO messages (id, agent_id, run_id, step_id, role, body, seq, created_at)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT (id) DO NOTHING),"
        " run AS (UPDATE runs SET step_count = step_count + 1, last_seq = $9 WHERE id = $3)"
        " INSERT INTO steps (id, run_id, agent_id, step_number, model, prompt_tokens,"
        " completion_tokens, total_tokens, finish_reason, seq, created_at)"
        " VALUES ($4,$3,$2,$10,$11,$12,$13,$14,$15,$9,$8) ON CONFLICT (id) DO NOTHING",
        e.message.id,
        e.agent_id,
        e.run_id,
        e.step_id,
        e.message.role,
        e.message.model_dump(mode="json", exclude_none=True),
        position(rec.seq),
        rec.envelope.time,
        rec.seq,
        e.step_number,
        e.model,
        e.usage.prompt_tokens,
        e.usage.completion_tokens,
        e.usage.total_tokens,
        e.finish_reason,
    )
    if e.message.approval_request:
        # Only the calls that wait for an answer; the held ones run once they are answered.
        for call in filter(e.message.awaiting, e.message.tool_calls):
            await conn.execute(
                "INSERT INTO pending_approvals (agent_id, tool_call_id, run_id, message_id,"
                " tool_name, seq) VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT DO NOTHING",
                e.agent_id,
                call.id,
                e.run_id,
                e.message.id,
                call.name,
                rec.seq,
            )


@runs.on(RunCancellationRequested)
async def run_cancellation_requested(
    conn: asyncpg.Connection, e: RunCancellationRequested, rec: Recorded
) -> None:
    await conn.execute("UPDATE runs SET cancel_requested = true WHERE id = $1", e.run_id)


@runs.on(ToolReturned)
async def tool_returned(conn: asyncpg.Connection, e: ToolReturned, rec: Recorded) -> None:
    await _insert_message(conn, rec, e.agent_id, e.run_id, e.step_id, e.message)
    await conn.execute(
        "DELETE FROM pending_approvals WHERE agent_id = $1 AND tool_call_id = $2",
        e.agent_id,
        e.message.tool_call_id,
    )


@runs.on(ContextSummarized)
async def context_summarized(conn: asyncpg.Connection, e: ContextSummarized, rec: Recorded) -> None:
    kept = await conn.fetchval("SELECT seq FROM messages WHERE id = $1", e.first_kept_message_id)
    if e.evicted_message_ids:  # (a version 1 event names them)
        await conn.execute(
            "UPDATE messages SET in_context = false WHERE id = ANY($1)", e.evicted_message_ids
        )
    elif kept is not None:
        # Every message in context before the first kept one left (the run's own
        # messages all come after it: a summary never cuts inside its run).
        await conn.execute(
            "UPDATE messages SET in_context = false"
            " WHERE agent_id = $1 AND in_context AND seq < $2",
            e.agent_id,
            kept,
        )
    # The summary sits right before the first message it did not replace.
    seq = before(kept if kept is not None else position(rec.seq))
    await conn.execute(
        "INSERT INTO messages (id, agent_id, run_id, step_id, role, body, seq, created_at)"
        " VALUES ($1,$2,$3,NULL,$4,$5,$6,$7) ON CONFLICT (id) DO NOTHING",
        e.summary.id,
        e.agent_id,
        e.run_id,
        e.summary.role,
        e.summary.model_dump(mode="json", exclude_none=True),
        seq,
        rec.envelope.time,
    )


@runs.on(RunCompleted)
async def run_completed(conn: asyncpg.Connection, e: RunCompleted, rec: Recorded) -> None:
    status = (
        "completed"
        if e.stop_reason in _COMPLETED
        else ("cancelled" if e.stop_reason == "cancelled" else "failed")
    )
    await conn.execute(
        "UPDATE runs SET status = $2, stop_reason = $3, usage = $4, step_count = $5, error = $6,"
        " completed_at = $7, last_seq = $8 WHERE id = $1",
        e.run_id,
        status,
        e.stop_reason,
        e.usage.model_dump(),
        e.step_count,
        e.error,
        rec.envelope.time,
        rec.seq,
    )
