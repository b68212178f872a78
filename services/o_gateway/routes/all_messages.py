"""`/v1/messages/`: messages across all agents, one message by its id, and a search of
them (message_search.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from o_contracts.agent_types import DEFAULT_AGENT_TYPE
from o_gateway.conversation_reads import rendered_messages
from o_gateway.message_pages import message_page, row_key
from o_gateway.message_search import SearchBody, search
from o_gateway.routes.paths import route
from o_gateway.state import GW, checked_id

router = APIRouter()

# Each message is rendered as its agent's type renders it (a deleted agent's as the
# default type): a letta_v1_agent's plain text is its reply.
COLUMNS = (
    "body, created_at, run_id, step_id, conversation_id,"
    " (SELECT agent_type FROM agents a WHERE a.id = messages.agent_id) AS agent_type"
)


@route(router, "GET", "/v1/messages/")
async def list_all_messages(
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Literal["asc", "desc"] = "desc",
) -> list[dict[str, Any]]:
    """As an agent's message list, over every agent: after is always newer, and the
    chosen page comes back oldest first."""
    rows = await message_page(
        gw.pool,
        # (concurrency "rollback": as if the run never ran)
        f"SELECT id, seq, {COLUMNS} FROM messages WHERE NOT rolled_back",
        [],
        before,
        after,
        limit,
        order,
        cursors_follow_order=False,
        unknown_cursor="not_found",
    )
    if order == "desc":
        rows = list(reversed(rows))
    return await rendered_messages(gw, rows, DEFAULT_AGENT_TYPE)


@route(router, "GET", "/v1/messages/{message_id}")
async def retrieve_message(message_id: str, gw: GW) -> list[dict[str, Any]]:
    """One stored message as Letta's API messages (one may give several: reasoning,
    a tool call), as Letta answers it. A tool result is shown with the other results
    of its step, as the one message lists show (tool_return_groups.py)."""
    row = await gw.pool.fetchrow(
        f"SELECT {COLUMNS} FROM messages WHERE id = $1", checked_id(message_id, "message")
    )
    if row is None:
        raise HTTPException(404, f"Message with id {message_id} not found.")
    rows = [row]
    if row_key(row) is not None:
        rows = await gw.pool.fetch(
            f"SELECT {COLUMNS} FROM messages WHERE run_id = $1 AND step_id = $2"
            " AND role = 'tool' ORDER BY seq",
            row["run_id"],
            row["step_id"],
        )
    return await rendered_messages(gw, rows, DEFAULT_AGENT_TYPE, a_page=False)


@route(router, "POST", "/v1/messages/search")
async def search_all_messages(body: SearchBody, gw: GW) -> list[dict[str, Any]]:
    """Messages matching a query, best first (full text: message_search.py)."""
    return await search(gw, body)
