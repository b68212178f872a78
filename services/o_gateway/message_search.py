"""`POST /v1/messages/search`: the messages of every agent (or of one, or of one of its
conversations) that match a query, best first, in Letta's search-result shape.

Letta answers this route only with Turbopuffer (its hosted service); its own server
refuses it ("requires ... Turbopuffer"), so Letta Code's `letta messages search` (and its
recall subagent) find nothing against it. O answers it from the runs projection's
messages by full text, as `conversation_search` does (o_executor/recall.py): a message
matches if it holds any word of the query (English stemming) or the query verbatim, and
verbatim matches come first, then by rank, then the newest. O keeps no embeddings of
messages, so `search_mode: "vector"` is refused with the reason; `hybrid` (Letta's
default) is the full-text ranking alone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import asyncpg
from fastapi import HTTPException
from pydantic import Field

from o_contracts.agent_types import DEFAULT_AGENT_TYPE
from o_gateway.conversation_reads import rendered_messages
from o_gateway.schemas import Body, Text
from o_gateway.state import Gateway, checked_id

# What a search result may be (Letta's LettaMessageSearchResult): the text a person or
# the agent wrote. Tool calls and returns are not searched.
RESULT_TYPES = {"system_message", "user_message", "reasoning_message", "assistant_message"}
SEARCHED_ROLES = ["user", "assistant"]


class SearchBody(Body):
    query: Text
    search_mode: Literal["vector", "fts", "hybrid"] = "hybrid"
    agent_id: str | None = None
    # A conversation's id, or "default" (with agent_id): the agent's default conversation.
    conversation_id: str | None = None
    limit: int = Field(default=50, ge=1, le=100)
    start_date: datetime | None = None
    end_date: datetime | None = None


_SEARCH = (
    # The query's words, stemmed as the index stems content, any of them (a query with no
    # word left, e.g. only stop words, matches nothing by rank, only verbatim).
    "WITH q AS (SELECT to_tsquery('simple', coalesce(nullif(array_to_string(ARRAY("
    "  SELECT quote_literal(l) FROM unnest(tsvector_to_array(to_tsvector('english', $1))) l"
    "), ' | '), ''), 'zzzzzz')) AS q)"
    " SELECT m.id, m.agent_id, m.body, m.created_at, m.run_id, m.step_id, m.conversation_id,"
    " a.agent_type,"
    " coalesce(m.body->>'content', '') ILIKE '%' || $2 || '%' ESCAPE '\\' AS verbatim,"
    " ts_rank_cd(to_tsvector('english', coalesce(m.body->>'content', '')), q.q) AS rank"
    " FROM q, messages m LEFT JOIN agents a ON a.id = m.agent_id"
    " WHERE NOT m.rolled_back AND m.role = ANY($3)"
    " AND ($4::text IS NULL OR m.agent_id = $4)"
    " AND (NOT $5 OR m.conversation_id IS NOT DISTINCT FROM $6)"
    " AND ($7::timestamptz IS NULL OR m.created_at >= $7)"
    " AND ($8::timestamptz IS NULL OR m.created_at <= $8)"
    " AND (to_tsvector('english', coalesce(m.body->>'content', '')) @@ q.q"
    "      OR coalesce(m.body->>'content', '') ILIKE '%' || $2 || '%' ESCAPE '\\')"
    " ORDER BY verbatim DESC, rank DESC, m.seq DESC LIMIT $9"
)


def like_pattern(text: str) -> str:
    """`text` for ILIKE, its wildcards matched as themselves."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def conversation_filter(body: SearchBody) -> tuple[bool, str | None]:
    """(whether to filter by conversation, the conversation: None for the default)."""
    if body.conversation_id is None:
        return False, None
    if body.conversation_id == "default" or body.conversation_id == body.agent_id:
        if body.agent_id is None:
            raise HTTPException(422, "conversation_id 'default' needs an agent_id")
        return True, None
    return True, checked_id(body.conversation_id, "conv")


def search_results(
    rendered: list[dict[str, Any]], rows: list[asyncpg.Record]
) -> list[dict[str, Any]]:
    """Rendered messages as Letta's search results: the kinds it returns, each with the
    message's id, agent and conversation (pure)."""
    owners = {r["id"]: r["agent_id"] for r in rows}
    out = []
    for m in rendered:
        kind = m.get("message_type")
        if kind not in RESULT_TYPES:
            continue
        result: dict[str, Any] = {
            "message_type": kind,
            "message_id": m["id"],
            "agent_id": owners.get(m["id"]),
            "conversation_id": m.get("conversation_id"),
            "created_at": m.get("date"),
        }
        if kind == "reasoning_message":
            result["reasoning"] = m.get("reasoning")
        else:
            result["content"] = m.get("content")
        out.append(result)
    return out


async def search(gw: Gateway, body: SearchBody) -> list[dict[str, Any]]:
    if body.search_mode == "vector":
        raise HTTPException(
            400,
            "search_mode 'vector' needs embeddings of messages, which O does not keep:"
            " use 'fts' or 'hybrid' (full text)",
        )
    agent_id = checked_id(body.agent_id, "agent") if body.agent_id is not None else None
    by_conversation, conversation_id = conversation_filter(body)
    query = body.query.strip()
    if not query:
        raise HTTPException(422, "query must not be empty")
    rows = await gw.pool.fetch(
        _SEARCH,
        query,
        like_pattern(query),
        SEARCHED_ROLES,
        agent_id,
        by_conversation,
        conversation_id,
        body.start_date,
        body.end_date,
        body.limit,
    )
    # (Each row rendered on its own: a page's tool-return grouping does not apply.)
    rendered = await rendered_messages(gw, rows, DEFAULT_AGENT_TYPE, a_page=False)
    return search_results(rendered, rows)
