"""The archival tools' arguments, checked, and their requests to the memory service.

The executor never touches archival memory itself: inserts are `InsertPassage`
commands, searches are `SearchArchival` requests (o_contracts.requests).
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client as NatsClient
from nats.errors import TimeoutError as NatsTimeout

from o_contracts import subjects
from o_contracts.ids import derived_id
from o_contracts.requests import ArchivalResults, SearchArchival, first_error
from o_runtime.watched_requests import request_watched

SEARCH_TIMEOUT = 30.0


class ArchivalCallError(ValueError):
    """Bad arguments or a refused request; the message is for the model."""


def _tags(args: dict[str, Any]) -> list[str]:
    tags = args.get("tags") or []
    if not isinstance(tags, list) or any(not isinstance(t, str) or not t.strip() for t in tags):
        raise ArchivalCallError("tags must be a list of non-empty strings")
    return tags


def insert_passage(
    agent_id: str, run_id: str, call_id: str, args: dict[str, Any]
) -> dict[str, Any]:
    content = args.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ArchivalCallError("content must be a non-empty string")
    return {
        "agent_id": agent_id,
        # Derived from the call, so a resumed run inserts the same passage once.
        "passage_id": derived_id("passage", run_id, call_id),
        "text": content,
        "tags": _tags(args),
    }


async def search_passages(
    nc: NatsClient, agent_id: str, args: dict[str, Any]
) -> list[dict[str, Any]]:
    known = {"query", "tags", "tag_match_mode", "top_k", "start_datetime", "end_datetime"}
    unknown = set(args) - known
    if unknown:
        raise ArchivalCallError(f"unknown argument(s): {', '.join(sorted(unknown))}")
    try:
        request = SearchArchival(
            agent_id=agent_id, **{k: v for k, v in args.items() if v is not None}
        )
    except ValueError as exc:
        raise ArchivalCallError(f"invalid search: {first_error(exc)}") from exc
    try:
        # (watched: a memory replica that dies mid-search is asked around at once)
        msg = await request_watched(
            nc,
            subjects.MEMORY_SEARCH_ARCHIVAL,
            request.encode(),
            role="memory",
            timeout=SEARCH_TIMEOUT,
        )
    except (TimeoutError, NatsTimeout) as exc:
        raise ArchivalCallError("the memory service did not answer the search in time") from exc
    answer = ArchivalResults.decode(msg.data)
    if not answer.ok:
        raise ArchivalCallError(answer.error or "search failed")
    return [
        {"timestamp": r["created_at"], "content": r["text"], "tags": r["tags"]}
        for r in answer.results
    ]
