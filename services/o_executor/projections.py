"""The executor's read model: every message of every conversation, conversations, and runs.

A conversation's events are on its own subject under the agent's
(`o.evt.agent.<agent>.conv.<conversation>`); the subject says which
conversation a run's messages belong to (None: the agent's default one).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    AgentCreated,
    AgentDeleted,
    ContextSummarized,
    ConversationCreated,
    ConversationDeleted,
    ConversationUpdated,
    LLMResponded,
    MessagesImported,
    MessagesReset,
    RunCancellationRequested,
    RunCompleted,
    RunQueued,
    RunRolledBack,
    RunStarted,
    RunSteered,
    SleeptimeTurnCounted,
    StepFeedbackGiven,
    SystemPromptRecompiled,
    ToolReturned,
)
from o_contracts.models import ChatMessage, answers_message
from o_contracts.ordering import before, imported_offset, position
from o_contracts.projection_names import RUNS
from o_executor import run_answers
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection

runs = Projection(
    name=RUNS,
    filter_subject=subjects.AGENT_AND_CONVERSATION_EVENTS,
    tables=[
        "messages",
        "runs",
        "steps",
        "pending_approvals",
        "conversations",
        "conversation_messages",
        "sleeptime_turns",
    ],
)

# Letta's run status for each stop reason; anything else is a failure.
_COMPLETED = {"end_turn", "max_steps", "tool_rule", "requires_approval", "no_tool_call"}


async def _insert_message(
    conn: asyncpg.Connection,
    rec: Recorded,
    agent_id: str,
    run_id: str | None,
    step_id: str | None,
    message: ChatMessage,
    offset: int = 0,
    *,
    seq: int | None = None,
    compiled_system: bool = False,
    created_at: datetime | None = None,
    in_context: bool = True,
) -> None:
    body = message.model_dump(mode="json", exclude_none=True)
    # Several messages from one event keep their order within the event.
    at = position(rec.seq, offset) if seq is None else seq
    time = created_at or rec.envelope.time
    await conn.execute(
        "INSERT INTO messages (id, agent_id, run_id, step_id, role, body, seq, created_at,"
        " conversation_id, compiled_system, in_context)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11) ON CONFLICT (id) DO NOTHING",
        message.id,
        agent_id,
        run_id,
        step_id,
        message.role,
        body,
        at,
        time,
        subjects.conversation_of(rec.subject),
        compiled_system,
        in_context,
    )
    run_answers.awaited.said(run_id, message, body, at, time, step_id)


@runs.on(AgentCreated)
async def agent_created(conn: asyncpg.Connection, e: AgentCreated, rec: Recorded) -> None:
    # The default conversation opens with the compiled system prompt, then
    # Letta's initial_message_sequence.
    first = [] if e.system_message is None else [e.system_message]
    for i, m in enumerate([*first, *e.initial_messages]):
        system = e.system_message is not None and i == 0
        await _insert_message(conn, rec, e.agent_id, None, None, m, i, compiled_system=system)


@runs.on(MessagesImported)
async def messages_imported(conn: asyncpg.Connection, e: MessagesImported, rec: Recorded) -> None:
    # Every other slot (1, 3, 5 ...): a summary placed right before an imported
    # message it kept (ordering.before) never shares a position with another.
    for i, item in enumerate(e.messages):
        await _insert_message(
            conn,
            rec,
            e.agent_id,
            None,
            None,
            item.message,
            imported_offset(i),
            created_at=item.created_at,
            in_context=item.in_context,
        )


@runs.on(AgentDeleted)
async def agent_deleted(conn: asyncpg.Connection, e: AgentDeleted, rec: Recorded) -> None:
    # Its conversations go with it (their messages stay, as the agent's do).
    await conn.execute(
        "UPDATE conversations SET deleted = true, updated_at = $2, last_seq = $3"
        " WHERE agent_id = $1 AND NOT deleted",
        e.agent_id,
        rec.envelope.time,
        rec.seq,
    )


@runs.on(ConversationCreated)
async def conversation_created(
    conn: asyncpg.Connection, e: ConversationCreated, rec: Recorded
) -> None:
    seq = position(rec.seq)
    if e.forked_from is not None:
        # The fork shares what was in the source's context as the log stood at
        # this event (this projection applies events in log order, so the
        # source's rows are exactly that now), after its own system message.
        await conn.execute(
            "INSERT INTO conversation_messages (conversation_id, message_id, seq)"
            f" {_IN_CONTEXT_OF} ON CONFLICT DO NOTHING",
            e.conversation_id,
            e.agent_id,
            e.forked_from or None,
        )
        first = await conn.fetchval(
            "SELECT min(seq) FROM conversation_messages WHERE conversation_id = $1",
            e.conversation_id,
        )
        if first is not None:
            seq = before(first)
    await conn.execute(
        "INSERT INTO conversations (id, agent_id, summary, model, model_settings,"
        " system_message_id, forked_from, created_at, updated_at, last_seq, isolated_block_ids)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$8,$9,$10) ON CONFLICT (id) DO NOTHING",
        e.conversation_id,
        e.agent_id,
        e.summary,
        e.model,
        e.model_settings,
        e.system_message.id,
        e.forked_from,
        rec.envelope.time,
        rec.seq,
        e.isolated_block_ids,
    )
    await _insert_message(
        conn, rec, e.agent_id, None, None, e.system_message, seq=seq, compiled_system=True
    )


# A conversation's in-context messages other than its system prompt ($2: the
# agent; $3: the conversation, NULL for the default one), as rows to copy into
# the fork $1.
_IN_CONTEXT_OF = (
    "SELECT $1, id, seq FROM messages WHERE agent_id = $2 AND in_context AND NOT compiled_system"
    " AND conversation_id IS NOT DISTINCT FROM $3"
    " UNION ALL SELECT $1, message_id, seq FROM conversation_messages"
    " WHERE conversation_id = $3 AND in_context"
)


@runs.on(ConversationUpdated)
async def conversation_updated(
    conn: asyncpg.Connection, e: ConversationUpdated, rec: Recorded
) -> None:
    changes = e.changes
    await conn.execute(
        "UPDATE conversations SET summary = CASE WHEN $2 THEN $3 ELSE summary END,"
        " model = CASE WHEN $4 THEN $5 ELSE model END,"
        " model_settings = CASE WHEN $6 THEN $7::jsonb ELSE model_settings END,"
        " updated_at = $8, last_seq = $9 WHERE id = $1",
        e.conversation_id,
        "summary" in changes,
        changes.get("summary"),
        "model" in changes,
        changes.get("model"),
        "model_settings" in changes,
        changes.get("model_settings"),
        rec.envelope.time,
        rec.seq,
    )


@runs.on(ConversationDeleted)
async def conversation_deleted(
    conn: asyncpg.Connection, e: ConversationDeleted, rec: Recorded
) -> None:
    await conn.execute(
        "UPDATE conversations SET deleted = true, updated_at = $2, last_seq = $3 WHERE id = $1",
        e.conversation_id,
        rec.envelope.time,
        rec.seq,
    )


@runs.on(MessagesReset)
async def messages_reset(conn: asyncpg.Connection, e: MessagesReset, rec: Recorded) -> None:
    await conn.execute(
        "UPDATE messages SET in_context = false WHERE agent_id = $1 AND in_context"
        " AND conversation_id IS NULL AND NOT compiled_system",
        e.agent_id,
    )
    if e.system_message_id is not None and e.system_prompt is not None:
        await conn.execute(
            "UPDATE messages SET body = jsonb_set(body, '{content}', to_jsonb($2::text))"
            " WHERE id = $1 AND compiled_system",
            e.system_message_id,
            e.system_prompt,
        )


@runs.on(SystemPromptRecompiled)
async def system_prompt_recompiled(
    conn: asyncpg.Connection, e: SystemPromptRecompiled, rec: Recorded
) -> None:
    # The one message whose body changes: it keeps its id and place (as Letta's does).
    await conn.execute(
        "UPDATE messages SET body = jsonb_set(body, '{content}', to_jsonb($2::text))"
        " WHERE id = $1 AND compiled_system",
        e.message_id,
        e.content,
    )


async def _insert_created_run(
    conn: asyncpg.Connection,
    rec: Recorded,
    run_id: str,
    agent_id: str,
    background: bool,
    request_config: Mapping[str, object],
    conversation_id: str | None,
    callback_url: str | None = None,
) -> None:
    """A run accepted and not started yet (status `created`)."""
    await conn.execute(
        "INSERT INTO runs (id, agent_id, status, created_at, last_seq, background, request_config,"
        " conversation_id, callback_url) VALUES ($1, $2, 'created', $3, $4, $5, $6, $7, $8)"
        " ON CONFLICT (id) DO NOTHING",
        run_id,
        agent_id,
        rec.envelope.time,
        rec.seq,
        background,
        request_config,
        conversation_id,
        callback_url,
    )


@runs.on(RunQueued)
async def run_queued(conn: asyncpg.Connection, e: RunQueued, rec: Recorded) -> None:
    conversation_id = subjects.conversation_of(rec.subject)
    await _insert_created_run(
        conn,
        rec,
        e.run_id,
        e.agent_id,
        e.background,
        e.request_config,
        conversation_id,
        e.callback_url,
    )
    if e.interrupts:
        # (Concurrency interrupt or rollback: each stops as if cancelled. A rollback
        # asked for sticks: a later plain interrupt does not take it over.)
        await conn.execute(
            "UPDATE runs SET cancel_requested = true,"
            " interrupted_by = CASE WHEN rolled_back AND NOT $3 THEN interrupted_by ELSE $2 END,"
            " rolled_back = rolled_back OR $3 WHERE id = ANY($1) AND agent_id = $4",
            e.interrupts,
            e.run_id,
            e.rollback,
            e.agent_id,
        )


@runs.on(RunRolledBack)
async def run_rolled_back(conn: asyncpg.Connection, e: RunRolledBack, rec: Recorded) -> None:
    # Out of the context and of the conversation's listings; the rows stay (the run's
    # own messages route shows them).
    await conn.execute(
        "UPDATE messages SET in_context = false, rolled_back = true"
        " WHERE run_id = $1 AND agent_id = $2",
        e.run_id,
        e.agent_id,
    )
    await conn.execute(
        "DELETE FROM pending_approvals WHERE agent_id = $1 AND run_id = $2", e.agent_id, e.run_id
    )


@runs.on(RunSteered)
async def run_steered(conn: asyncpg.Connection, e: RunSteered, rec: Recorded) -> None:
    # The steering messages are the run's from here on, where it took them.
    for i, m in enumerate(e.messages):
        await _insert_message(conn, rec, e.agent_id, e.run_id, None, m, i)
    await conn.execute("UPDATE runs SET last_seq = $2 WHERE id = $1", e.run_id, rec.seq)


@runs.on(SleeptimeTurnCounted)
async def sleeptime_turn_counted(
    conn: asyncpg.Connection, e: SleeptimeTurnCounted, rec: Recorded
) -> None:
    await conn.execute(
        "INSERT INTO sleeptime_turns (run_id, group_id, agent_id, turns_counter, started,"
        " after_message_id, last_processed_message_id, skipped, created_at, seq)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10) ON CONFLICT (run_id) DO NOTHING",
        e.run_id,
        e.group_id,
        e.agent_id,
        e.turns_counter,
        [r.model_dump() for r in e.started],
        e.after_message_id,
        e.last_processed_message_id,
        e.skipped,
        rec.envelope.time,
        rec.seq,
    )
    # The companion runs exist from this event on (as a RunQueued would make
    # them): the manager's reply can name them, and they list at once.
    for run in e.started:
        config = run.request_config(e.run_id)
        await _insert_created_run(conn, rec, run.run_id, run.agent_id, True, config, None)


_RUN_STARTED = (
    "INSERT INTO runs (id, agent_id, status, created_at, last_seq, started_seq, background,"
    " request_config, conversation_id) VALUES ($1, $2, 'running', $3, $4, $4, $5, $6, $7)"
    " ON CONFLICT (id) DO UPDATE SET status = 'running', last_seq = $4, started_seq = $4"
    " WHERE runs.status = 'created'"
)


async def _run_version(conn: asyncpg.Connection, e: RunStarted) -> None:
    assert e.version is not None
    await conn.execute(
        "UPDATE runs SET rollout_id = $2, rollout_arm = $3, rollout_weight = $4, version_id = $5"
        " WHERE id = $1",
        e.run_id,
        e.version.rollout_id,
        e.version.arm,
        e.version.weight,
        e.version.version_id,
    )


@runs.on(RunStarted)
async def run_started(conn: asyncpg.Connection, e: RunStarted, rec: Recorded) -> None:
    run_answers.awaited.began(e.run_id)
    conversation_id = subjects.conversation_of(rec.subject)
    args = (
        e.run_id,
        e.agent_id,
        rec.envelope.time,
        rec.seq,
        e.background,
        e.request_config,
        conversation_id,
    )
    if conversation_id is not None:
        await conn.execute(
            "UPDATE conversations SET last_message_at = $2 WHERE id = $1",
            conversation_id,
            rec.envelope.time,
        )
    await _run_rows(conn, e, rec, conversation_id, args)
    if e.version is not None:
        # (Only while a canary runs: the usual run keeps its one statement.)
        await _run_version(conn, e)
    if e.callback_url is not None:
        # (A run started over NATS with a callback_url has no RunQueued that set it.)
        await conn.execute(
            "UPDATE runs SET callback_url = $2 WHERE id = $1 AND callback_url IS NULL",
            e.run_id,
            e.callback_url,
        )


async def _run_rows(
    conn: asyncpg.Connection,
    e: RunStarted,
    rec: Recorded,
    conversation_id: str | None,
    args: tuple[Any, ...],
) -> None:
    if len(e.messages) != 1 or e.approvals:
        await conn.execute(_RUN_STARTED, *args)
        for i, m in enumerate(e.messages):
            await _insert_message(conn, rec, e.agent_id, e.run_id, None, m, i)
        if e.approvals:
            # The answers, shown as Letta's approval_response_message before what they caused.
            answers = answers_message(e.run_id, e.approvals)
            await _insert_message(conn, rec, e.agent_id, e.run_id, None, answers, len(e.messages))
        return
    # The usual run: one input message, with the run in one statement (one round trip).
    # (The user's own: not in the run's answer, run_answers.py.)
    message = e.messages[0]
    await conn.execute(
        f"WITH run AS ({_RUN_STARTED})"
        " INSERT INTO messages (id, agent_id, run_id, step_id, role, body, seq, created_at,"
        " conversation_id) VALUES ($8, $2, $1, NULL, $9, $10, $11, $3, $7)"
        " ON CONFLICT (id) DO NOTHING",
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
    body = e.message.model_dump(mode="json", exclude_none=True)
    run_answers.awaited.said(
        e.run_id, e.message, body, position(rec.seq), rec.envelope.time, e.step_id
    )
    await conn.execute(
        "WITH message AS ("
        " INSERT INTO messages (id, agent_id, run_id, step_id, role, body, seq, created_at,"
        " conversation_id) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$16) ON CONFLICT (id) DO NOTHING),"
        " run AS (UPDATE runs SET step_count = step_count + 1, last_seq = $9 WHERE id = $3)"
        " INSERT INTO steps (id, run_id, agent_id, step_number, model, prompt_tokens,"
        " completion_tokens, total_tokens, finish_reason, seq, created_at, step_start_ns,"
        " llm_request_start_ns, llm_request_ns, cached_input_tokens, cache_write_tokens)"
        " VALUES ($4,$3,$2,$10,$11,$12,$13,$14,$15,$9,$8,$17,$18,$19,$20,$21)"
        " ON CONFLICT (id) DO NOTHING",
        e.message.id,
        e.agent_id,
        e.run_id,
        e.step_id,
        e.message.role,
        body,
        position(rec.seq),
        rec.envelope.time,
        rec.seq,
        e.step_number,
        e.model,
        e.usage.prompt_tokens,
        e.usage.completion_tokens,
        e.usage.total_tokens,
        e.finish_reason,
        subjects.conversation_of(rec.subject),
        e.step_start_ns,
        e.llm_request_start_ns,
        e.llm_request_ns,
        e.usage.cached_input_tokens,
        e.usage.cache_write_tokens,
    )
    if e.message.approval_request:
        # Only the calls that wait for an answer; the held ones run once they are answered.
        for call in filter(e.message.awaiting, e.message.tool_calls):
            await conn.execute(
                "INSERT INTO pending_approvals (agent_id, tool_call_id, run_id, message_id,"
                " tool_name, seq, conversation_id) VALUES ($1,$2,$3,$4,$5,$6,$7)"
                " ON CONFLICT DO NOTHING",
                e.agent_id,
                call.id,
                e.run_id,
                e.message.id,
                call.name,
                rec.seq,
                subjects.conversation_of(rec.subject),
            )


@runs.on(StepFeedbackGiven)
async def step_feedback_given(
    conn: asyncpg.Connection, e: StepFeedbackGiven, rec: Recorded
) -> None:
    # Set, not added: events apply in log order, so the latest rating is the one
    # kept, and applying one again changes nothing.
    await conn.execute(
        "UPDATE steps SET feedback = $2, tags = COALESCE($3, tags) WHERE id = $1",
        e.step_id,
        e.feedback,
        e.tags,
    )


@runs.on(RunCancellationRequested)
async def run_cancellation_requested(
    conn: asyncpg.Connection, e: RunCancellationRequested, rec: Recorded
) -> None:
    await conn.execute("UPDATE runs SET cancel_requested = true WHERE id = $1", e.run_id)


@runs.on(ToolReturned)
async def tool_returned(conn: asyncpg.Connection, e: ToolReturned, rec: Recorded) -> None:
    await _insert_message(conn, rec, e.agent_id, e.run_id, e.step_id, e.message)
    # (A tool run in a later run, once approved, does not count in its step's time.)
    await conn.execute(
        "WITH step AS (UPDATE steps SET tools_returned_at = $3 WHERE id = $4 AND run_id = $5)"
        " DELETE FROM pending_approvals WHERE agent_id = $1 AND tool_call_id = $2",
        e.agent_id,
        e.message.tool_call_id,
        rec.envelope.time,
        e.step_id,
        e.run_id,
    )


@runs.on(ContextSummarized)
async def context_summarized(conn: asyncpg.Connection, e: ContextSummarized, rec: Recorded) -> None:
    kept: int | None = None
    if e.first_kept_message_id is not None:
        kept = await conn.fetchval(
            "SELECT seq FROM messages WHERE id = $1", e.first_kept_message_id
        )
    everything = e.first_kept_message_id is None
    if e.evicted_message_ids:  # (a version 1 event names them)
        await conn.execute(
            "UPDATE messages SET in_context = false WHERE id = ANY($1)", e.evicted_message_ids
        )
    elif kept is not None or everything:
        # (Everything: every message before this event's position.)
        kept = kept if kept is not None else position(rec.seq)
        # Every message in context before the first kept one left (the run's own
        # messages all come after it: a summary never cuts inside its run), in
        # this conversation only, all but its system prompt; in a fork, the
        # inherited ones too.
        conversation_id = subjects.conversation_of(rec.subject)
        await conn.execute(
            "UPDATE messages SET in_context = false WHERE agent_id = $1 AND in_context"
            " AND seq < $2 AND NOT compiled_system AND conversation_id IS NOT DISTINCT FROM $3",
            e.agent_id,
            kept,
            conversation_id,
        )
        if conversation_id is not None:
            await conn.execute(
                "UPDATE conversation_messages SET in_context = false"
                " WHERE conversation_id = $1 AND in_context AND seq < $2",
                conversation_id,
                kept,
            )
    # The summary sits right before the first message it did not replace (or,
    # when everything left, at this event's place).
    seq = (
        position(rec.seq) if everything else before(kept if kept is not None else position(rec.seq))
    )
    await _insert_message(conn, rec, e.agent_id, e.run_id, None, e.summary, seq=seq)


@runs.on(RunCompleted)
async def run_completed(conn: asyncpg.Connection, e: RunCompleted, rec: Recorded) -> None:
    if e.answer is not None:
        # The answer that ended the run, recorded with its end: applied as its own
        # LLMResponded would be, just before (in the same transaction).
        await llm_responded(conn, e.answer, rec)
    status = (
        "completed"
        if e.stop_reason in _COMPLETED
        else ("cancelled" if e.stop_reason == "cancelled" else "failed")
    )
    usage = e.usage.model_dump()
    await conn.execute(
        "UPDATE runs SET status = $2, stop_reason = $3, usage = $4, step_count = $5, error = $6,"
        " completed_at = $7, last_seq = $8 WHERE id = $1",
        e.run_id,
        status,
        e.stop_reason,
        usage,
        e.step_count,
        e.error,
        rec.envelope.time,
        rec.seq,
    )
    # (A reply in this process waiting for the run carries its answer: run_answers.py.)
    run_answers.awaited.ended(
        e.run_id, e.stop_reason, usage, e.step_count, subjects.conversation_of(rec.subject)
    )
