"""Recall memory: `conversation_search` over every message the agent ever exchanged.

It stays on the executor's `messages` projection rather than moving behind the
memory service: that table already holds every message of every run, and
nothing is ever removed from it when the context window evicts messages
(eviction only changes what is compiled into the prompt), so evicted
messages are found too. A copy in the memory service would be a second
projection of the same events for no gain, and one more network hop per call.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

ROLES = ("user", "assistant", "tool", "system")
DEFAULT_ROLES = ["user", "assistant"]
MAX_LIMIT = 100


class RecallError(ValueError):
    """Bad arguments; the message is for the model."""


def _date(value: Any, name: str, *, end: bool) -> datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise RecallError(f"{name} must be an ISO 8601 date or date-time string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise RecallError(f"{name} '{value}' is not an ISO 8601 date or date-time") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    if end and len(value) == 10:
        # A bare end date includes that whole day.
        parsed += timedelta(days=1) - timedelta(microseconds=1)
    return parsed


def parse_args(args: dict[str, Any]) -> dict[str, Any]:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise RecallError("query must be a non-empty string")
    roles = args.get("roles") or DEFAULT_ROLES
    if not isinstance(roles, list) or any(r not in ROLES for r in roles):
        raise RecallError(f"roles must be a list drawn from {list(ROLES)}")
    limit = args.get("limit") or 10
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise RecallError(f"limit must be an integer from 1 to {MAX_LIMIT}")
    start = _date(args.get("start_date"), "start_date", end=False)
    end = _date(args.get("end_date"), "end_date", end=True)
    if start and end and start > end:
        raise RecallError("start_date is after end_date")
    return {"query": query.strip(), "roles": roles, "limit": limit, "start": start, "end": end}


async def search(pool: asyncpg.Pool, agent_id: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Messages matching any query word (full text) or containing the query verbatim."""
    p = parse_args(args)
    rows = await pool.fetch(
        "WITH q AS (SELECT to_tsquery('simple', coalesce(nullif(array_to_string(ARRAY("
        "  SELECT quote_literal(l) FROM unnest(tsvector_to_array(to_tsvector('english', $2))) l"
        "), ' | '), ''), 'zzzzzz')) AS q)"
        " SELECT m.id, m.role, m.body, m.created_at,"
        " ts_rank_cd(to_tsvector('english', coalesce(m.body->>'content', '')), q.q) AS rank"
        " FROM messages m, q WHERE m.agent_id = $1 AND m.role = ANY($3) AND NOT m.rolled_back"
        " AND (to_tsvector('english', coalesce(m.body->>'content', '')) @@ q.q"
        "      OR m.body->>'content' ILIKE '%' || $2 || '%')"
        " AND ($4::timestamptz IS NULL OR m.created_at >= $4)"
        " AND ($5::timestamptz IS NULL OR m.created_at <= $5)"
        " ORDER BY (m.body->>'content' ILIKE '%' || $2 || '%') DESC, rank DESC, m.seq DESC"
        " LIMIT $6",
        agent_id,
        p["query"],
        p["roles"],
        p["start"],
        p["end"],
        p["limit"],
    )
    return [
        {
            "id": r["id"],
            "role": r["role"],
            "content": r["body"].get("content"),
            "date": r["created_at"].isoformat(),
        }
        for r in rows
    ]


def render(found: list[dict[str, Any]]) -> str:
    return json.dumps(found) if found else "No results found."
