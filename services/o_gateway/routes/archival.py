"""Archival memory: `/v1/agents/{agent_id}/archival-memory` (Letta v1 shapes).

Writes go to the memory service as commands; search is a request to it
(it embeds the query and records which passages it returned); listing reads
the memory service's projection.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from nats.errors import NoRespondersError
from pydantic import Field

from o_contracts import subjects
from o_contracts.commands import DeletePassage, InsertPassage
from o_contracts.projection_names import ARCHIVAL
from o_contracts.requests import ArchivalResults, SearchArchival, first_error
from o_gateway.commands import memory_command
from o_gateway.idempotency import IdempotencyKey, checked_key, resource_id
from o_gateway.pagination import Listing
from o_gateway.passages import PASSAGE_COLUMNS, passage
from o_gateway.routes.paths import route
from o_gateway.schemas import Body, Tags, Text
from o_gateway.state import GW, Gateway, checked_id
from o_runtime.watched_requests import request_watched

router = APIRouter()
SEARCH_TIMEOUT = 30.0
# An insert may wait for the agent's LLM to rate importance.
INSERT_TIMEOUT = 90.0


class CreatePassageBody(Body):
    text: Annotated[Text, Field(min_length=1)]
    tags: Tags | None = None
    created_at: datetime | None = None
    # O extension: importance 1-10; without it the agent's LLM rates the memory.
    importance: int | None = Field(default=None, ge=1, le=10)


@route(router, "POST", "/v1/agents/{agent_id}/archival-memory")
async def insert(
    agent_id: str, body: CreatePassageBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> list[dict[str, Any]]:
    agent = await gw.agent_row(checked_id(agent_id, "agent"))
    if not body.text.strip():
        raise HTTPException(400, "text must not be empty")
    key = checked_key(idempotency_key)
    passage_id = resource_id("passage", key, agent_id)
    reply = await memory_command(
        gw,
        InsertPassage(
            agent_id=agent_id,
            passage_id=passage_id,
            text=body.text,
            tags=body.tags or [],
            created_at=body.created_at,
            importance=body.importance,
        ),
        agent_id,
        timeout=INSERT_TIMEOUT,
        command_id=resource_id("cmd", key, passage_id) if key else None,
    )
    await gw.visible(reply.seq, ARCHIVAL)
    return [passage((reply.result or {})["passage"], agent["embedding_config"])]


async def archives_of(gw: Gateway, agent_id: str) -> list[str]:
    archives: list[str] = await gw.pool.fetchval(
        "SELECT coalesce(array_agg(archive_id), '{}') FROM archive_agents WHERE agent_id = $1",
        agent_id,
    )
    return archives


def agent_passages(q: Listing, archives: list[str], agent_id: str) -> None:
    """The agent's archival memory: its own passages and those of its archives
    (events/archives.py). Without archives (most agents), its own alone, which the index
    of an agent's passages by time serves."""
    if archives:
        q.filter(
            "(agent_id = {} AND archive_id IS NULL OR archive_id = ANY({}))", agent_id, archives
        )
    else:
        q.filter("agent_id = {} AND archive_id IS NULL", agent_id)


@route(router, "GET", "/v1/agents/{agent_id}/archival-memory")
async def list_passages(
    agent_id: str,
    gw: GW,
    after: str | None = None,
    before: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    search: str | None = None,
    ascending: bool = True,
) -> list[dict[str, Any]]:
    agent = await gw.agent_row(checked_id(agent_id, "agent"))
    q = Listing("passages", columns=PASSAGE_COLUMNS)
    agent_passages(q, await archives_of(gw, agent_id), agent_id)
    if search:
        q.filter("text ILIKE {}", f"%{search}%")
    rows = await q.page(gw.pool, "passage", before, after, "asc" if ascending else "desc", limit)
    return [passage(dict(r), agent["embedding_config"]) for r in rows]


@route(router, "GET", "/v1/agents/{agent_id}/archival-memory/search")
async def search(
    agent_id: str,
    gw: GW,
    query: str,
    tags: Annotated[list[str] | None, Query()] = None,
    tag_match_mode: Literal["any", "all"] = "any",
    top_k: Annotated[int | None, Query(ge=1, le=100)] = None,
    start_datetime: datetime | None = None,
    end_datetime: datetime | None = None,
    # O extension: "relevance" ranks by relevance alone, ignoring recency and importance.
    ranking: Literal["stream", "relevance"] = "stream",
) -> dict[str, Any]:
    await gw.agent_row(checked_id(agent_id, "agent"))
    try:
        request = SearchArchival(
            agent_id=agent_id,
            query=query,
            tags=tags or [],
            tag_match_mode=tag_match_mode,
            top_k=top_k or 5,
            start_datetime=start_datetime,
            end_datetime=end_datetime,
            ranking=ranking,
        )
    except ValueError as exc:
        raise HTTPException(422, first_error(exc)) from exc
    results = await search_archival(gw, request)
    return {
        "results": [
            {"id": r["id"], "timestamp": r["created_at"], "content": r["text"], "tags": r["tags"]}
            for r in results
        ],
        "count": len(results),
    }


async def search_archival(gw: Gateway, request: SearchArchival) -> list[dict[str, Any]]:
    try:
        # (watched: a memory replica that dies mid-search is asked around at once)
        msg = await request_watched(
            gw.eventlog.nc,
            subjects.MEMORY_SEARCH_ARCHIVAL,
            request.encode(),
            role="memory",
            timeout=SEARCH_TIMEOUT,
        )
    except NoRespondersError as exc:
        raise HTTPException(503, "no memory service is running to search") from exc
    except TimeoutError as exc:
        raise HTTPException(504, "the memory service did not answer the search in time") from exc
    answer = ArchivalResults.decode(msg.data)
    if not answer.ok:
        raise HTTPException(answer.status, answer.error or "search failed")
    return answer.results


@route(router, "DELETE", "/v1/agents/{agent_id}/archival-memory/{memory_id}")
async def delete(agent_id: str, memory_id: str, gw: GW) -> None:
    await gw.agent_row(checked_id(agent_id, "agent"))
    checked_id(memory_id, "passage")
    reply = await memory_command(
        gw, DeletePassage(agent_id=agent_id, passage_id=memory_id), agent_id
    )
    await gw.visible(reply.seq, ARCHIVAL)
