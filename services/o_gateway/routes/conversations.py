"""Conversations (Letta's /v1/conversations): many per agent, each with its own messages
and run order, all sharing the agent's memory.

A conversation's events are on its own subject (`o.evt.agent.<agent>.conv.<id>`),
decided here and projected by the runs projection. `{conversation_id}` may be
"default" (with the agent's id) or an agent id: the agent's default
conversation, whose messages are the agent-level routes' (conversation_reads.resolve).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from o_contracts.commands import CreateBlock, DeleteBlock
from o_contracts.concurrency import CONVERSATION_ROUTES
from o_contracts.directories import limits_of, render_directories
from o_contracts.envelope import Envelope
from o_contracts.events import (
    ConversationCreated,
    ConversationDeleted,
    ConversationUpdated,
    MessagesReset,
    SystemPromptRecompiled,
)
from o_contracts.ids import new_id
from o_contracts.models import BlockSpec, ChatMessage
from o_contracts.projection_names import MEMORY, RUNS
from o_contracts.subjects import Lane
from o_contracts.system_prompt import compile_system, recompiled_at
from o_contracts.tool_rules import ToolRuleSolver
from o_gateway import render
from o_gateway.agent_reads import agent_state
from o_gateway.commands import PRODUCER, memory_command
from o_gateway.conversation_reads import (
    MessageTypeName,
    conversation_json,
    conversation_row,
    in_context_ids,
    lane_messages,
    of_types,
    rendered_messages,
    resolve,
)
from o_gateway.idempotency import IdempotencyKey
from o_gateway.model_settings import ModelSettingsBody, to_llm_config
from o_gateway.routes.messages import cancel_in, compaction_mode, send_in, summarize_in
from o_gateway.routes.paths import route
from o_gateway.routes.runs import ACTIVE
from o_gateway.schemas import (
    AgentIdBody,
    CompactBody,
    ConversationMessageBody,
    CreateConversationBody,
    ResetMessagesBody,
    RetrieveStreamBody,
    UpdateConversationBody,
)
from o_gateway.state import GW, Gateway, checked_id
from o_gateway.streaming import Numbering, stream_run, streamed
from o_memory.core_memory import read_core_memory

router = APIRouter()


async def compiled_prompt(
    gw: Gateway, lane: Lane, now: datetime, isolated: list[str] | None = None
) -> str:
    """The agent's system prompt with its memory as it is now, for this conversation
    (its own blocks in place of the agent's: `isolated`, else as recorded)."""
    agent = await gw.agent_row(lane.agent_id)
    if isolated is None and lane.conversation_id is not None:
        isolated = list(
            await gw.pool.fetchval(
                "SELECT isolated_block_ids FROM conversations WHERE id = $1",
                lane.conversation_id,
            )
            or []
        )
    core = await read_core_memory(gw.pool, lane.agent_id, isolated or [])
    recall: int = await gw.pool.fetchval(
        "SELECT count(*) FROM messages WHERE agent_id = $1 AND NOT compiled_system",
        lane.agent_id,
    )
    # As the executor compiles it for the model (o_executor/run/model_call.py): the agent's
    # folders after its blocks, its tool rules last.
    max_open, char_limit = limits_of(agent["llm_config"])
    return (
        compile_system(
            agent["system"],
            lane.agent_id,
            core["blocks"],
            recall,
            archival_count=core["archival_count"],
            archival_tags=core["archival_tags"],
            conversation_id=lane.conversation_id,
            now=now,
            directories=render_directories(core.get("directories") or [], max_open, char_limit),
        )
        + ToolRuleSolver(list(agent["tool_rules"] or [])).prompt()
    )


async def show(gw: Gateway, conversation_id: str) -> dict[str, Any]:
    row = await conversation_row(gw, conversation_id)
    return conversation_json(row, await in_context_ids(gw, Lane(row["agent_id"], row["id"])))


_BLOCK_COLUMNS = 'id, label, value, "limit", description, read_only, metadata, tags'


async def own_blocks(gw: Gateway, agent_id: str, labels: list[str]) -> list[dict[str, Any]]:
    """The agent's blocks with these labels (to copy as a new conversation's own); 404 for
    a label it has none of."""
    rows = await gw.pool.fetch(
        f"SELECT {_BLOCK_COLUMNS} FROM agent_blocks ab JOIN blocks b ON b.id = ab.block_id"
        " WHERE ab.agent_id = $1 AND b.label = ANY($2)",
        agent_id,
        labels,
    )
    found = {r["label"]: dict(r) for r in rows}
    missing = [label for label in labels if label not in found]
    if missing:
        raise HTTPException(404, f"Agent {agent_id} has no block labelled '{missing[0]}'")
    return [found[label] for label in dict.fromkeys(labels)]


async def copies(gw: Gateway, blocks: list[dict[str, Any]]) -> list[str]:
    """New blocks with these blocks' contents (created by the memory service, visible)."""
    ids: list[str] = []
    last = 0
    for b in blocks:
        block_id = new_id("block")
        spec = BlockSpec(
            label=b["label"],
            value=b["value"],
            limit=b["limit"],
            description=b["description"],
            read_only=b["read_only"],
            metadata=b["metadata"] or {},
            tags=list(b["tags"] or []),
        )
        reply = await memory_command(gw, CreateBlock(block_id=block_id, spec=spec), block_id)
        last = max(last, reply.seq or 0)
        ids.append(block_id)
    await gw.visible(last, MEMORY)
    return ids


async def _open(
    gw: Gateway,
    agent_id: str,
    body: CreateConversationBody,
    forked_from: str | None = None,
    own: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A new conversation (a fork of `forked_from`, "" for the default one), with copies
    of `own` (blocks) as its own, as shown."""
    lane = Lane(agent_id, new_id("conv"))
    now = datetime.now(UTC)
    isolated = await copies(gw, own or [])
    system = ChatMessage(
        id=new_id("message"),
        role="system",
        content=await compiled_prompt(gw, lane, now, isolated),
    )
    event = ConversationCreated(
        conversation_id=lane.key,
        agent_id=agent_id,
        system_message=system,
        summary=body.summary,
        model=body.model,
        # (What the client set: the rest stays the model's own.)
        model_settings=(
            body.model_settings.model_dump(exclude_unset=True) if body.model_settings else None
        ),
        forked_from=forked_from,
        isolated_block_ids=isolated,
    )
    appended = await gw.eventlog.append(
        lane.events,
        Envelope.wrap(event, aggregate_id=agent_id, producer=PRODUCER),
        expected_last_seq=0,
    )
    await gw.visible(appended.seq, RUNS)
    return await show(gw, lane.key)


@route(router, "POST", "/v1/conversations/")
async def create_conversation(
    gw: GW, agent_id: str, body: CreateConversationBody | None = None
) -> dict[str, Any]:
    await gw.agent_row(checked_id(agent_id, "agent"))
    body = body or CreateConversationBody()
    own = await own_blocks(gw, agent_id, list(body.isolated_block_labels or []))
    return await _open(gw, agent_id, body, own=own)


@route(router, "GET", "/v1/conversations/")
async def list_conversations(
    gw: GW,
    agent_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    after: str | None = None,
    summary_search: str | None = None,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at", "last_run_completion", "last_message_at"] = "created_at",
) -> list[dict[str, Any]]:
    """The conversations (of one agent, or all), newest first by default."""
    where = ["NOT c.deleted"]
    args: list[Any] = []
    if agent_id is not None:
        args.append(checked_id(agent_id, "agent"))
        where.append(f"c.agent_id = ${len(args)}")
    if summary_search:
        args.append(f"%{summary_search}%")
        where.append(f"c.summary ILIKE ${len(args)}")
    key = {
        "created_at": "c.created_at",
        "last_message_at": "c.last_message_at",
        "last_run_completion": "(SELECT max(r.completed_at) FROM runs r"
        " WHERE r.conversation_id = c.id)",
    }[order_by]
    direction = "ASC" if order == "asc" else "DESC"
    nulls = "NULLS FIRST" if order == "asc" else "NULLS LAST"
    sort = f"{key} {direction} {nulls}, c.id {direction}"
    rows = [
        dict(r)
        for r in await gw.pool.fetch(
            f"SELECT c.*, {key} AS sort_key FROM conversations c WHERE {' AND '.join(where)}"
            f" ORDER BY {sort}",
            *args,
        )
    ]
    if after:
        # A cursor the list does not hold is ignored (as Letta does).
        ids = [r["id"] for r in rows]
        if after in ids:
            rows = rows[ids.index(after) + 1 :]
    rows = rows[:limit]
    return [
        conversation_json(r, await in_context_ids(gw, Lane(r["agent_id"], r["id"]))) for r in rows
    ]


@route(router, "GET", "/v1/conversations/{conversation_id}")
async def get_conversation(conversation_id: str, gw: GW) -> dict[str, Any]:
    return await show(gw, conversation_id)


@route(router, "PATCH", "/v1/conversations/{conversation_id}")
async def update_conversation(
    conversation_id: str, body: UpdateConversationBody, gw: GW
) -> dict[str, Any]:
    row = await conversation_row(gw, conversation_id)
    changes = body.model_dump(exclude_unset=True)
    if changes:
        lane = Lane(row["agent_id"], row["id"])
        event = ConversationUpdated(
            conversation_id=lane.key, agent_id=lane.agent_id, changes=changes
        )
        appended = await gw.eventlog.append(
            lane.events, Envelope.wrap(event, aggregate_id=lane.agent_id, producer=PRODUCER)
        )
        await gw.visible(appended.seq, RUNS)
    return await show(gw, conversation_id)


@route(router, "DELETE", "/v1/conversations/{conversation_id}")
async def delete_conversation(conversation_id: str, gw: GW) -> None:
    """Soft delete: the conversation is gone from the API; its messages stay in the history."""
    row = await conversation_row(gw, conversation_id)
    lane = Lane(row["agent_id"], row["id"])
    event = ConversationDeleted(conversation_id=lane.key, agent_id=lane.agent_id)
    appended = await gw.eventlog.append(
        lane.events, Envelope.wrap(event, aggregate_id=lane.agent_id, producer=PRODUCER)
    )
    await gw.visible(appended.seq, RUNS)
    # Its own blocks go with it (as Letta's do). A retried delete is 404 above: a
    # block left by a gateway that died here stays, attached to nothing.
    for block_id in row["isolated_block_ids"]:
        await memory_command(gw, DeleteBlock(block_id=block_id), block_id)


@route(router, "POST", "/v1/conversations/{conversation_id}/fork")
async def fork_conversation(
    conversation_id: str, gw: GW, agent_id: str | None = None
) -> dict[str, Any]:
    """A new conversation that starts with the source's in-context messages (shared)."""
    lane = await resolve(gw, conversation_id, agent_id)
    source = await gw.pool.fetchrow(
        "SELECT summary, model, model_settings, isolated_block_ids FROM conversations"
        " WHERE id = $1",
        lane.conversation_id,
    )
    body = CreateConversationBody()
    own: list[dict[str, Any]] = []
    if source is not None:
        body = CreateConversationBody(
            summary=source["summary"],
            model=source["model"],
            model_settings=source["model_settings"],
        )
        # The fork gets its own copies of the source's own blocks, as they are now.
        rows = await gw.pool.fetch(
            f"SELECT {_BLOCK_COLUMNS} FROM blocks WHERE id = ANY($1)",
            list(source["isolated_block_ids"]),
        )
        own = [dict(r) for r in rows]
    return await _open(gw, lane.agent_id, body, forked_from=lane.conversation_id or "", own=own)


@route(router, "GET", "/v1/conversations/{conversation_id}/messages")
async def list_conversation_messages(
    conversation_id: str,
    gw: GW,
    agent_id: str | None = None,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Literal["asc", "desc"] = "desc",
    include_return_message_types: Annotated[list[MessageTypeName] | None, Query()] = None,
) -> list[dict[str, Any]]:
    lane = await resolve(gw, conversation_id, agent_id)
    agent = await gw.agent_row(lane.agent_id)
    rows = await lane_messages(gw, lane, before, after, limit, order, cursors_follow_order=True)
    rendered = await rendered_messages(gw, rows, agent["agent_type"], newest_first=order == "desc")
    return of_types(rendered, include_return_message_types)


@route(router, "POST", "/v1/conversations/{conversation_id}/messages")
async def send_conversation_message(
    conversation_id: str,
    body: ConversationMessageBody,
    gw: GW,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """Run the agent in this conversation; 409 while another of its runs is in progress
    (unless the request or the agent names another concurrency policy)."""
    lane, sent = await conversation_request(gw, conversation_id, body)
    return await send_in(
        lane,
        sent.body,
        gw,
        body.streaming,
        idempotency_key,
        route_policy=CONVERSATION_ROUTES,
        isolated_block_ids=sent.isolated_block_ids,
        override_settings=sent.override_settings,
        as_sent=body,
    )


@dataclass(frozen=True)
class InConversation:
    """A request to run the agent, with what its conversation adds to it."""

    body: ConversationMessageBody
    isolated_block_ids: list[str]
    override_settings: dict[str, Any]


async def conversation_request(
    gw: Gateway, conversation_id: str, body: ConversationMessageBody
) -> tuple[Lane, InConversation]:
    """The conversation a message goes to, and the request with the conversation's blocks,
    model and settings (the request's own override above them)."""
    if not body.messages and not body.input:
        raise HTTPException(422, "Messages must not be empty")
    lane = await resolve(gw, conversation_id, body.agent_id)
    isolated: list[str] = []
    settings: dict[str, Any] = {}
    if lane.conversation_id is not None:
        row = await gw.pool.fetchrow(
            "SELECT model, model_settings, isolated_block_ids FROM conversations WHERE id = $1",
            lane.conversation_id,
        )
        isolated = list(row["isolated_block_ids"]) if row else []
        if row is not None and body.override_model is None:
            if row["model"]:
                body = body.model_copy(update={"override_model": row["model"]})
            if row["model_settings"]:
                settings = to_llm_config(ModelSettingsBody.model_validate(row["model_settings"]))
    return lane, InConversation(body, isolated, settings)


@route(router, "POST", "/v1/conversations/{conversation_id}/stream")
async def retrieve_conversation_stream(
    conversation_id: str, gw: GW, body: RetrieveStreamBody | None = None
) -> Any:
    """Follow a background run of the conversation again: named by run_id or by an otid of
    its request, else its latest active one."""
    body = body or RetrieveStreamBody()
    lane = await resolve(gw, conversation_id, body.agent_id)
    agent = await gw.agent_row(lane.agent_id)
    query = (
        "SELECT r.id, r.background, r.status, r.request_config,"
        " coalesce(r.started_seq, r.last_seq) AS first_seq FROM runs r"
        " WHERE r.agent_id = $1 AND r.conversation_id IS NOT DISTINCT FROM $2"
    )
    args: list[Any] = [lane.agent_id, lane.conversation_id]
    if body.run_id:
        args.append(checked_id(body.run_id, "run"))
        query += f" AND r.id = ${len(args)}"
    elif body.otid:
        args.append(body.otid)
        query += (
            " AND EXISTS (SELECT 1 FROM messages m WHERE m.run_id = r.id"
            f" AND m.role = 'user' AND m.body->>'otid' = ${len(args)})"
        )
    else:
        args.append(list(ACTIVE))
        query += f" AND r.status = ANY(${len(args)})"
    run = await gw.pool.fetchrow(query + " ORDER BY r.created_at DESC LIMIT 1", *args)
    if run is None:
        raise HTTPException(400, "No active runs found for this conversation.")
    if not run["background"]:
        raise HTTPException(
            400, f"Run {run['id']} was not created in background mode, so it cannot be retrieved."
        )
    return streamed(
        stream_run(
            gw,
            lane,
            agent["agent_type"],
            run["id"],
            start_seq=run["first_seq"],
            include_pings=body.include_pings,
            view=render.AssistantView.of(run["request_config"]),
            numbering=Numbering(starting_after=body.starting_after),
        )
    )


@route(router, "POST", "/v1/conversations/{conversation_id}/cancel")
async def cancel_conversation(
    conversation_id: str, gw: GW, agent_id: str | None = None
) -> dict[str, str]:
    lane = await resolve(gw, conversation_id, agent_id)
    return await cancel_in(gw, lane, [])


@route(router, "POST", "/v1/conversations/{conversation_id}/recompile")
async def recompile_conversation(
    conversation_id: str, gw: GW, dry_run: bool = False, body: AgentIdBody | None = None
) -> str:
    """The conversation's system prompt compiled with the agent's memory as it is now;
    stored as its system message unless `dry_run`."""
    lane = await resolve(gw, conversation_id, body.agent_id if body else None)
    return await recompile(gw, lane, dry_run=dry_run, update_timestamp=True)


@route(router, "POST", "/v1/agents/{agent_id}/recompile")
async def recompile_agent(
    agent_id: str, gw: GW, update_timestamp: bool = False, dry_run: bool = False
) -> str:
    """The agent's (default conversation's) system prompt recompiled, as Letta's
    `recompile_agent`: its "last recompiled" time moves only with `update_timestamp`."""
    lane = Lane(checked_id(agent_id, "agent"))
    return await recompile(gw, lane, dry_run=dry_run, update_timestamp=update_timestamp)


@route(router, "POST", "/v1/agents/{agent_id}/system-prompt/recompile")
async def recompile_agent_system_prompt(
    agent_id: str, gw: GW, update_timestamp: bool = False, dry_run: bool = False
) -> str:
    """Letta's deprecated name for `POST /v1/agents/{agent_id}/recompile`."""
    lane = Lane(checked_id(agent_id, "agent"))
    return await recompile(gw, lane, dry_run=dry_run, update_timestamp=update_timestamp)


async def recompile(gw: Gateway, lane: Lane, *, dry_run: bool, update_timestamp: bool) -> str:
    stored = await gw.pool.fetchrow(
        "SELECT id, body->>'content' AS content FROM messages WHERE agent_id = $1"
        " AND compiled_system AND conversation_id IS NOT DISTINCT FROM $2 ORDER BY seq LIMIT 1",
        lane.agent_id,
        lane.conversation_id,
    )
    now = datetime.now(UTC)
    # Without update_timestamp the prompt keeps the time it was last compiled with
    # (Letta keeps its memory's last-edit time the same way).
    kept = None if update_timestamp or stored is None else recompiled_at(stored["content"] or "")
    prompt = await compiled_prompt(gw, lane, kept or now)
    if dry_run:
        return prompt
    if stored is None:
        raise HTTPException(404, f"No system message found for {lane.key}")
    event = SystemPromptRecompiled(
        agent_id=lane.agent_id,
        conversation_id=lane.conversation_id,
        message_id=stored["id"],
        content=prompt,
        recompiled_at=now.isoformat(),
    )
    appended = await gw.eventlog.append(
        lane.events, Envelope.wrap(event, aggregate_id=lane.agent_id, producer=PRODUCER)
    )
    await gw.visible(appended.seq, RUNS)
    return prompt


@route(router, "PATCH", "/v1/agents/{agent_id}/reset-messages")
async def reset_messages(
    agent_id: str, gw: GW, body: ResetMessagesBody | None = None
) -> dict[str, Any]:
    """Clear the default conversation's context but for its system message, recompiled
    with memory as it is now (the messages stay in the history). O has no default
    initial messages: `add_default_initial_messages` adds none."""
    lane = Lane(checked_id(agent_id, "agent"))
    prompt = await compiled_prompt(gw, lane, datetime.now(UTC))
    system_id = await gw.pool.fetchval(
        "SELECT id FROM messages WHERE agent_id = $1 AND compiled_system"
        " AND conversation_id IS NULL ORDER BY seq LIMIT 1",
        agent_id,
    )
    event = MessagesReset(
        agent_id=agent_id,
        system_message_id=system_id,
        system_prompt=prompt if system_id is not None else None,
    )
    appended = await gw.eventlog.append(
        lane.events, Envelope.wrap(event, aggregate_id=agent_id, producer=PRODUCER)
    )
    await gw.visible(appended.seq, RUNS)
    return await agent_state(gw, agent_id)


@route(router, "POST", "/v1/conversations/{conversation_id}/compact")
async def compact_conversation(
    conversation_id: str, gw: GW, body: CompactBody | None = None
) -> dict[str, Any]:
    """Summarize the conversation's older messages now (they stay in its history)."""
    lane = await resolve(gw, conversation_id, body.agent_id if body else None)
    # Nothing but the system prompt in context: nothing to compact.
    if len(await in_context_ids(gw, lane)) <= 1:
        raise HTTPException(400, "No messages in context to compact")
    result = await summarize_in(gw, lane, compaction_mode(body))
    if result["num_messages_after"] >= result["num_messages_before"]:
        raise HTTPException(400, "Compaction did not reduce the number of messages in context")
    return result
