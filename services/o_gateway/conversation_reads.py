"""Conversations as the API shows them, and the messages of one conversation.

A conversation is a lane of the agent's messages (o_contracts.subjects.Lane):
the default one is the agent's own messages (`conversation_id` NULL); a named
one has its own, plus the messages a fork inherited (`conversation_messages`,
at their original positions). Every conversation opens with its compiled
system prompt.
"""

from __future__ import annotations

from typing import Any, Literal

import asyncpg
from fastapi import HTTPException

from o_contracts.ids import is_id
from o_contracts.models import ChatMessage
from o_contracts.subjects import Lane
from o_gateway import render
from o_gateway.images import image_data
from o_gateway.message_pages import message_page
from o_gateway.state import Gateway, checked_id
from o_gateway.tool_return_groups import StepKey, message_key, shown

Order = Literal["asc", "desc"]
# Letta's MessageType: what a listing's `include_return_message_types` may name.
MessageTypeName = Literal[
    "system_message",
    "user_message",
    "assistant_message",
    "reasoning_message",
    "hidden_reasoning_message",
    "tool_call_message",
    "tool_return_message",
    "approval_request_message",
    "approval_response_message",
    "summary_message",
    "event_message",
]

_COLUMNS = "id, seq, body, created_at, run_id, step_id, compiled_system, conversation_id"

# The lane's messages as one relation ($1: the agent, $2: the conversation or NULL),
# but a rolled-back run's (concurrency "rollback": as if it never ran; a fork keeps
# what it inherited before).
_LANE = (
    f"SELECT {_COLUMNS}, in_context FROM messages"
    " WHERE agent_id = $1 AND conversation_id IS NOT DISTINCT FROM $2 AND NOT rolled_back"
    " UNION ALL SELECT m.id, c.seq, m.body, m.created_at, m.run_id, m.step_id,"
    " m.compiled_system, m.conversation_id, c.in_context FROM conversation_messages c"
    " JOIN messages m ON m.id = c.message_id WHERE c.conversation_id = $2"
)

# All of an agent's own messages, in every conversation (each once: a fork's inherited
# messages are its source's), but a rolled-back run's.
_AGENT = f"SELECT {_COLUMNS} FROM messages WHERE agent_id = $1 AND NOT rolled_back"


async def lane_in_context(pool: asyncpg.Pool, lane: Lane) -> list[asyncpg.Record]:
    """The conversation's in-context messages (its system prompt first), in order."""
    return list(
        await pool.fetch(
            f"SELECT * FROM ({_LANE}) t WHERE in_context ORDER BY seq",
            lane.agent_id,
            lane.conversation_id,
        )
    )


async def lane_messages(
    db: Gateway | asyncpg.Pool,
    lane: Lane,
    before: str | None,
    after: str | None,
    limit: int,
    order: Order,
    *,
    cursors_follow_order: bool = False,
) -> list[asyncpg.Record]:
    """A page of the conversation's messages, in `order`: `limit` of them, one step's tool
    results counting as one (message_pages.py).

    Cursors are message ids; one the conversation does not hold is ignored (as
    Letta does). `after` means further along in `order` with
    `cursors_follow_order` (Letta's conversation routes), else newer (its
    agent-level route).
    """
    pool = db.pool if isinstance(db, Gateway) else db
    return await message_page(
        pool,
        _LANE,
        [lane.agent_id, lane.conversation_id],
        before,
        after,
        limit,
        order,
        cursors_follow_order=cursors_follow_order,
    )


async def agent_messages(
    gw: Gateway, agent_id: str, before: str | None, after: str | None, limit: int, order: Order
) -> list[asyncpg.Record]:
    """A page of the agent's messages in all its conversations, in `order` (`after`:
    newer), as Letta lists an agent's messages when no conversation is named."""
    return await message_page(
        gw.pool, _AGENT, [agent_id], before, after, limit, order, cursors_follow_order=False
    )


def of_types(
    messages: list[dict[str, Any]], types: list[MessageTypeName] | None
) -> list[dict[str, Any]]:
    """Only the messages of `types` (None: all), as Letta filters a page: after it is
    read, so a page may hold fewer than its limit."""
    if types is None:
        return messages
    return [m for m in messages if m.get("message_type") in types]


async def in_context_ids(gw: Gateway, lane: Lane) -> list[str]:
    """The conversation's in-context messages, system prompt first."""
    rows = await gw.pool.fetch(
        f"SELECT id FROM ({_LANE}) t WHERE in_context ORDER BY seq",
        lane.agent_id,
        lane.conversation_id,
    )
    return [r["id"] for r in rows]


async def rendered_messages(
    gw: Gateway,
    rows: list[asyncpg.Record],
    agent_type: str,
    view: render.AssistantView = render.DEFAULT_VIEW,
    *,
    a_page: bool = True,
    newest_first: bool = False,
) -> list[dict[str, Any]]:
    """Stored messages (rows with body, created_at, run_id, step_id, conversation_id and,
    where agents differ, agent_type) as Letta's API messages, with their images' data.

    On `a_page`, the reply tool's returns whose calls are on it are left out, as Letta
    lists them (not for one message asked for by its id). `newest_first`: the rows
    are in descending order.
    """
    hidden: set[str] | None = set() if a_page else None
    messages = [ChatMessage.model_validate(r["body"]) for r in rows]
    images = await image_data(gw, messages)

    def render_one(item: tuple[ChatMessage, asyncpg.Record]) -> list[dict[str, Any]]:
        m, r = item
        return render.letta_messages(
            m,
            r["created_at"],
            r["run_id"],
            r["step_id"],
            r.get("agent_type") or agent_type,
            hidden,
            view,
            images,
            conversation_id=r["conversation_id"],
        )

    # One step's tool results show as one message (tool_return_groups.py).
    return shown(
        list(zip(messages, rows, strict=True)), _group_of, render_one, newest_first=newest_first
    )


def _group_of(item: tuple[ChatMessage, asyncpg.Record]) -> StepKey | None:
    m, r = item
    return message_key(m, r["run_id"], r["step_id"])


async def conversation_row(gw: Gateway, conversation_id: str) -> dict[str, Any]:
    """A conversation that exists (not deleted), or 404."""
    row = await gw.pool.fetchrow(
        "SELECT * FROM conversations WHERE id = $1 AND NOT deleted",
        checked_id(conversation_id, "conv"),
    )
    if row is None:
        raise HTTPException(404, f"Conversation {conversation_id} not found")
    return dict(row)


async def resolve(gw: Gateway, conversation_id: str, agent_id: str | None) -> Lane:
    """The lane a `{conversation_id}` path names, as Letta reads it.

    "default" with an agent id (query or body) is that agent's default
    conversation; an agent id in its place too (Letta's older form);
    otherwise a conversation id.
    """
    if conversation_id == "default":
        if not agent_id:
            raise HTTPException(
                422, "agent_id is required to address the default conversation ('default')"
            )
        await gw.agent_row(checked_id(agent_id, "agent"))
        return Lane(agent_id)
    if is_id(conversation_id, "agent"):
        await gw.agent_row(conversation_id)
        return Lane(conversation_id)
    row = await conversation_row(gw, conversation_id)
    return Lane(row["agent_id"], row["id"])


def conversation_json(row: dict[str, Any], in_context: list[str]) -> dict[str, Any]:
    """Letta's Conversation."""
    return {
        "id": row["id"],
        "agent_id": row["agent_id"],
        "summary": row["summary"],
        "in_context_message_ids": in_context,
        "isolated_block_ids": list(row.get("isolated_block_ids") or []),
        "model": row["model"],
        "model_settings": row["model_settings"],
        "last_message_at": render.iso(row["last_message_at"]),
        "created_at": render.iso(row["created_at"]),
        "updated_at": render.iso(row["updated_at"]),
        "created_by_id": None,
        "last_updated_by_id": None,
    }
