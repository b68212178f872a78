"""`/v1/archives/`: archival passages that agents share (Letta's archives), and Letta's
`POST /v1/passages/search` across them.

An archive is the memory service's to decide (events/archives.py): every change here is
a command to it, and reads are its archival projection. An agent's archival memory is its
own passages and those of the archives attached to it; while one is attached, what the
agent writes to archival memory goes into the first one attached, where every agent
sharing it finds it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import asyncpg
from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import Field

from o_contracts.commands import (
    ArchivePassage,
    AttachArchive,
    CreateArchive,
    DeleteArchive,
    DeleteArchivePassage,
    DetachArchive,
    InsertArchivePassages,
    UpdateArchive,
)
from o_contracts.limits import MAX_ARCHIVE_BATCH
from o_contracts.projection_names import ARCHIVAL
from o_contracts.requests import SearchArchival, first_error
from o_gateway.agent_reads import agents_where
from o_gateway.commands import memory_command
from o_gateway.idempotency import IdempotencyKey, checked_key, resource_id
from o_gateway.models_config import LOCAL_EMBEDDING, embedding_config_for
from o_gateway.pagination import Listing
from o_gateway.passages import PASSAGE_COLUMNS, passage
from o_gateway.render import ORGANIZATION_ID
from o_gateway.routes.archival import agent_passages, archives_of, search_archival
from o_gateway.routes.paths import route
from o_gateway.schemas import Body, Description, Name, Object, Tags, Text
from o_gateway.state import GW, Gateway, checked_id
from o_runtime import llm_providers, provider_registry
from o_runtime.provider_types import is_embedding_model

router = APIRouter()
# Passages are embedded before the memory service answers.
INSERT_TIMEOUT = 90.0


class CreateArchiveBody(Body):
    name: Annotated[Name, Field(min_length=1)]
    # The embedding model handle (e.g. "openai/text-embedding-3-small"); None: O's local one.
    embedding: Name | None = None
    # Deprecated in Letta for `embedding`: only its handle is used.
    embedding_config: Object | None = None
    description: Description | None = None


class UpdateArchiveBody(Body):
    name: Annotated[Name, Field(min_length=1)] | None = None
    description: Description | None = None


class CreateArchivePassageBody(Body):
    text: Annotated[Text, Field(min_length=1)]
    metadata: Object | None = None
    tags: Tags | None = None
    created_at: datetime | None = None


class CreateArchivePassagesBody(Body):
    passages: Annotated[
        list[CreateArchivePassageBody], Field(min_length=1, max_length=MAX_ARCHIVE_BATCH)
    ]


def embedding_config(handle: str) -> dict[str, Any]:
    return LOCAL_EMBEDDING if handle == LOCAL_EMBEDDING["handle"] else embedding_config_for(handle)


def archive_json(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "id": row["id"],
        "name": row["name"],
        "description": row["description"],
        "vector_db_provider": "native",
        "embedding_config": embedding_config(row["embedding_model"]),
        "organization_id": ORGANIZATION_ID,
        "metadata": None,
        "created_at": row["created_at"].isoformat(),
        "updated_at": row["updated_at"].isoformat(),
        "created_by_id": None,
        "last_updated_by_id": None,
    }


async def archive_row(gw: Gateway, archive_id: str) -> asyncpg.Record:
    row = await gw.pool.fetchrow("SELECT * FROM archives WHERE id = $1", archive_id)
    if row is None:
        raise HTTPException(404, f"Archive {archive_id} not found")
    return row


async def embedding_handle(gw: Gateway, body: CreateArchiveBody) -> str | None:
    """The handle the archive embeds with, checked (None: O's local model). As Letta's,
    `embedding_config` wins over `embedding`, and an unknown model is a 400."""
    handle = body.embedding
    if body.embedding_config:
        config = body.embedding_config
        handle = config.get("handle")
        if not handle:
            kind, model = config.get("embedding_endpoint_type"), config.get("embedding_model")
            if not isinstance(kind, str) or not isinstance(model, str) or not kind or not model:
                raise HTTPException(
                    422,
                    "embedding_config needs a handle, or embedding_endpoint_type and"
                    " embedding_model",
                )
            handle = f"{kind}/{model}"
        if not isinstance(handle, str):
            raise HTTPException(422, "embedding_config.handle must be a string")
    if handle is None or handle == LOCAL_EMBEDDING["handle"]:
        return None
    provider_name, _, model = handle.partition("/")
    # What the memory service embeds with (o_memory/embeddings.py): the local model, or an
    # embedding model of a provider that speaks OpenAI's protocol, the operator's or one
    # registered through the API.
    await provider_registry.ensure(provider_name, gw.pool)
    provider = llm_providers.configured().get(provider_name)
    if (
        provider is None
        or provider.protocol != "openai"
        or not (is_embedding_model(model) or model in provider.embedding_models)
    ):
        raise HTTPException(400, f"Embedding model {handle} not found")
    return handle


@route(router, "POST", "/v1/archives/")
async def create_archive(
    body: CreateArchiveBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    key = checked_key(idempotency_key)
    archive_id = resource_id("archive", key)
    reply = await memory_command(
        gw,
        CreateArchive(
            archive_id=archive_id,
            name=body.name,
            description=body.description,
            embedding=await embedding_handle(gw, body),
        ),
        archive_id,
        command_id=resource_id("cmd", key, archive_id) if key else None,
    )
    await gw.visible(reply.seq, ARCHIVAL)
    return archive_json(await archive_row(gw, archive_id))


@route(router, "GET", "/v1/archives/")
async def list_archives(
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
    name: str | None = None,
    agent_id: str | None = None,
) -> list[dict[str, Any]]:
    q = Listing("archives")
    if name is not None:
        q.filter("name = {}", name)
    if agent_id is not None:
        await gw.agent_row(checked_id(agent_id, "agent"))
        q.filter("id IN (SELECT archive_id FROM archive_agents WHERE agent_id = {})", agent_id)
    rows = await q.page(gw.pool, "archive", before, after, order, limit)
    return [archive_json(r) for r in rows]


@route(router, "GET", "/v1/archives/{archive_id}")
async def retrieve_archive(archive_id: str, gw: GW) -> dict[str, Any]:
    return archive_json(await archive_row(gw, checked_id(archive_id, "archive")))


@route(router, "PATCH", "/v1/archives/{archive_id}")
async def modify_archive(archive_id: str, body: UpdateArchiveBody, gw: GW) -> dict[str, Any]:
    checked_id(archive_id, "archive")
    reply = await memory_command(
        gw,
        UpdateArchive(
            archive_id=archive_id,
            **body.model_dump(include={"name", "description"}, exclude_none=True),
        ),
        archive_id,
    )
    await gw.visible(reply.seq, ARCHIVAL)
    return archive_json(await archive_row(gw, archive_id))


@route(router, "DELETE", "/v1/archives/{archive_id}", status_code=204)
async def delete_archive(archive_id: str, gw: GW) -> Response:
    checked_id(archive_id, "archive")
    reply = await memory_command(gw, DeleteArchive(archive_id=archive_id), archive_id)
    await gw.visible(reply.seq, ARCHIVAL)
    return Response(status_code=204)


@route(router, "GET", "/v1/archives/{archive_id}/agents")
async def list_agents_for_archive(
    archive_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
) -> list[dict[str, Any]]:
    await archive_row(gw, checked_id(archive_id, "archive"))
    return await agents_where(
        gw,
        "id IN (SELECT agent_id FROM archive_agents WHERE archive_id = {})",
        archive_id,
        before,
        after,
        order,
        limit,
    )


async def _insert(
    gw: Gateway, archive_id: str, bodies: list[CreateArchivePassageBody], key: str | None
) -> list[dict[str, Any]]:
    archive = await archive_row(gw, checked_id(archive_id, "archive"))
    if any(not b.text.strip() for b in bodies):
        raise HTTPException(400, "text must not be empty")
    passages = [
        ArchivePassage(
            passage_id=resource_id("passage", key, archive_id, str(n)),
            text=b.text,
            tags=b.tags or [],
            created_at=b.created_at,
            metadata=b.metadata or {},
        )
        for n, b in enumerate(bodies)
    ]
    try:
        command = InsertArchivePassages(archive_id=archive_id, passages=passages)
    except ValueError as exc:  # (their text together over the limit)
        raise HTTPException(422, str(exc)) from exc
    reply = await memory_command(
        gw,
        command,
        archive_id,
        timeout=INSERT_TIMEOUT,
        command_id=resource_id("cmd", key, archive_id, "passages") if key else None,
    )
    await gw.visible(reply.seq, ARCHIVAL)
    rows = {
        r["id"]: r
        for r in await gw.pool.fetch(
            f"SELECT {PASSAGE_COLUMNS} FROM passages WHERE id = ANY($1)",
            [p.passage_id for p in passages],
        )
    }
    config = embedding_config(archive["embedding_model"])
    return [passage(dict(rows[p.passage_id]), config) for p in passages if p.passage_id in rows]


@route(router, "POST", "/v1/archives/{archive_id}/passages")
async def create_passage_in_archive(
    archive_id: str,
    body: CreateArchivePassageBody,
    gw: GW,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    created = await _insert(gw, archive_id, [body], checked_key(idempotency_key))
    if not created:  # (deleted by another request in between)
        raise HTTPException(409, "the passage was deleted meanwhile")
    return created[0]


@route(router, "POST", "/v1/archives/{archive_id}/passages/batch")
async def create_passages_in_archive(
    archive_id: str,
    body: CreateArchivePassagesBody,
    gw: GW,
    idempotency_key: IdempotencyKey = None,
) -> list[dict[str, Any]]:
    return await _insert(gw, archive_id, body.passages, checked_key(idempotency_key))


@route(router, "DELETE", "/v1/archives/{archive_id}/passages/{passage_id}", status_code=204)
async def delete_passage_from_archive(archive_id: str, passage_id: str, gw: GW) -> Response:
    checked_id(archive_id, "archive")
    checked_id(passage_id, "passage")
    reply = await memory_command(
        gw, DeleteArchivePassage(archive_id=archive_id, passage_id=passage_id), archive_id
    )
    await gw.visible(reply.seq, ARCHIVAL)
    return Response(status_code=204)


async def _attachment(gw: Gateway, command: AttachArchive | DetachArchive) -> None:
    await gw.agent_row(checked_id(command.agent_id, "agent"))
    checked_id(command.archive_id, "archive")
    reply = await memory_command(gw, command, command.archive_id)
    await gw.visible(reply.seq, ARCHIVAL)


@route(router, "PATCH", "/v1/agents/{agent_id}/archives/attach/{archive_id}")
async def attach_archive_to_agent(agent_id: str, archive_id: str, gw: GW) -> None:
    await _attachment(gw, AttachArchive(archive_id=archive_id, agent_id=agent_id))


@route(router, "PATCH", "/v1/agents/{agent_id}/archives/detach/{archive_id}")
async def detach_archive_from_agent(agent_id: str, archive_id: str, gw: GW) -> None:
    await _attachment(gw, DetachArchive(archive_id=archive_id, agent_id=agent_id))


class SearchPassagesBody(Body):
    query: Text | None = None
    agent_id: str | None = None
    archive_id: str | None = None
    tags: Tags | None = None
    tag_match_mode: Literal["any", "all"] = "any"
    limit: Annotated[int, Field(ge=1, le=100)] = 50
    start_date: datetime | None = None
    end_date: datetime | None = None


def _scored(row: dict[str, Any], score: float) -> dict[str, Any]:
    return {
        "passage": passage(row, embedding_config(row["embedding_model"])),
        "score": score,
        "metadata": {},
    }


@route(router, "POST", "/v1/passages/search")
async def search_passages(body: SearchPassagesBody, gw: GW) -> list[dict[str, Any]]:
    """Letta's passage search: an agent's archival memory (`agent_id`, which wins), one
    archive's passages (`archive_id`), or every passage; by relevance to `query`, or the
    oldest first without one."""
    if body.agent_id is not None:
        await gw.agent_row(checked_id(body.agent_id, "agent"))
    elif body.archive_id is not None:
        await archive_row(gw, checked_id(body.archive_id, "archive"))
    if body.query is not None and body.query.strip():
        try:
            request = SearchArchival(
                agent_id=body.agent_id,
                archive_id=None if body.agent_id else body.archive_id,
                query=body.query,
                tags=body.tags or [],
                tag_match_mode=body.tag_match_mode,
                top_k=body.limit,
                start_datetime=body.start_date,
                end_datetime=body.end_date,
                ranking="relevance",
            )
        except ValueError as exc:
            raise HTTPException(422, first_error(exc)) from exc
        return [_scored(r, float(r["score"])) for r in await search_archival(gw, request)]
    q = Listing("passages", columns=PASSAGE_COLUMNS)
    if body.agent_id is not None:
        agent_passages(q, await archives_of(gw, body.agent_id), body.agent_id)
    elif body.archive_id is not None:
        q.filter("archive_id = {}", body.archive_id)
    if body.tags:
        q.filter("tags @> {}" if body.tag_match_mode == "all" else "tags && {}", body.tags)
    if body.start_date is not None:
        q.filter("created_at >= {}", body.start_date)
    if body.end_date is not None:
        q.filter("created_at <= {}", body.end_date)
    # (Without a query: the oldest first, as Letta lists them.)
    rows = await q.page(gw.pool, "passage", None, None, "asc", body.limit)
    return [_scored(dict(r), 0.0) for r in rows]
