"""Core memory blocks: `/v1/blocks/` and the agent-scoped core-memory routes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from o_contracts.commands import CreateBlock, DeleteBlock, RestoreBlockVersion, UpdateBlock
from o_contracts.projection_names import AGENTS, MEMORY
from o_gateway import render, sleeptime
from o_gateway.agent_reads import agent_state, agents_where, blocks_of
from o_gateway.agent_requests import block_spec
from o_gateway.commands import memory_command
from o_gateway.decisions import AttachBlock, DetachBlock, change_agent
from o_gateway.idempotency import IdempotencyKey, checked_key, resource_id
from o_gateway.identity_reads import by_identity
from o_gateway.pagination import Listing, page_of
from o_gateway.routes.paths import route
from o_gateway.schemas import CreateBlockBody, UpdateBlockBody
from o_gateway.state import GW, Gateway, checked_id

router = APIRouter()


async def block_row(gw: Gateway, block_id: str) -> dict[str, Any]:
    row = await gw.pool.fetchrow("SELECT * FROM blocks WHERE id = $1", block_id)
    if row is None:
        raise HTTPException(404, f"Block {block_id} not found")
    return dict(row)


async def update(
    gw: Gateway, block_id: str, body: UpdateBlockBody, idempotency_key: str | None = None
) -> dict[str, Any]:
    changes = body.model_dump(exclude_unset=True)
    key = checked_key(idempotency_key)
    if changes:
        # With a key, a retry is the same command: the memory service answers it
        # from the version it made instead of making another.
        reply = await memory_command(
            gw,
            UpdateBlock(block_id=block_id, changes=changes),
            block_id,
            command_id=resource_id("cmd", key, block_id, "update") if key else None,
        )
        await gw.visible(reply.seq, MEMORY)
    return render.block(await block_row(gw, block_id))


@route(router, "POST", "/v1/blocks/")
async def create_block(
    body: CreateBlockBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    key = checked_key(idempotency_key)
    block_id = resource_id("block", key)
    reply = await memory_command(
        gw,
        CreateBlock(block_id=block_id, spec=block_spec(body)),
        block_id,
        command_id=resource_id("cmd", key, block_id) if key else None,
    )
    await gw.visible(reply.seq, MEMORY)
    return render.block(await block_row(gw, block_id))


def block_filters(
    q: Listing,
    label: str | None = None,
    tags: list[str] | None = None,
    match_all_tags: bool = False,
    label_search: str | None = None,
    description_search: str | None = None,
    value_search: str | None = None,
) -> Listing:
    """Letta's block filters, shared by the list and the count."""
    if label is not None:
        q.filter("label = {}", label)
    if tags:
        q.filter(f"tags {'@>' if match_all_tags else '&&'} {{}}", tags)
    for column, text in (
        ("label", label_search),
        ("description", description_search),
        ("value", value_search),
    ):
        if text:
            q.filter(f"{column} ILIKE {{}}", f"%{text}%")
    return q


@route(router, "GET", "/v1/blocks/")
async def list_blocks(
    gw: GW,
    label: str | None = None,
    tags: Annotated[list[str] | None, Query()] = None,
    match_all_tags: bool = False,
    label_search: str | None = None,
    description_search: str | None = None,
    value_search: str | None = None,
    identity_id: str | None = None,
    identifier_keys: Annotated[list[str] | None, Query()] = None,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "asc",
    order_by: Literal["created_at"] = "created_at",
) -> list[dict[str, Any]]:
    q = block_filters(
        Listing("blocks"),
        label,
        tags,
        match_all_tags,
        label_search,
        description_search,
        value_search,
    )
    by_identity(q, "identity_blocks", identity_id, identifier_keys)
    rows = await q.page(gw.pool, "block", before, after, order, limit)
    return [render.block(dict(r)) for r in rows]


@route(router, "GET", "/v1/blocks/count")
async def count_blocks(
    gw: GW,
    label: str | None = None,
    tags: Annotated[list[str] | None, Query()] = None,
    match_all_tags: bool = False,
) -> int:
    return await block_filters(Listing("blocks"), label, tags, match_all_tags).count(gw.pool)


@route(router, "GET", "/v1/blocks/{block_id}")
async def get_block(block_id: str, gw: GW) -> dict[str, Any]:
    return render.block(await block_row(gw, checked_id(block_id, "block")))


@route(router, "PATCH", "/v1/blocks/{block_id}")
async def update_block(
    block_id: str, body: UpdateBlockBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    return await update(gw, checked_id(block_id, "block"), body, idempotency_key)


@route(router, "DELETE", "/v1/blocks/{block_id}")
async def delete_block(block_id: str, gw: GW) -> None:
    checked_id(block_id, "block")
    reply = await memory_command(gw, DeleteBlock(block_id=block_id), block_id)
    await gw.visible(reply.seq, MEMORY)


# Agent-scoped core memory.


@route(router, "GET", "/v1/agents/{agent_id}/core-memory/blocks")
async def list_agent_blocks(
    agent_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
) -> list[dict[str, Any]]:
    await gw.agent_row(checked_id(agent_id, "agent"))
    # Letta orders an agent's blocks by id here (whatever order_by says); so does O,
    # so a cursor means the same on both.
    blocks = sorted(await blocks_of(gw, agent_id), key=lambda b: str(b["id"]))
    page = page_of(blocks, lambda b: str(b["id"]), before, after, order, limit)
    return [render.block(b) for b in page]


@route(router, "GET", "/v1/blocks/{block_id}/agents")
async def list_block_agents(
    block_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
) -> list[dict[str, Any]]:
    """The agents this block is attached to (a 404 for an unknown block)."""
    await block_row(gw, checked_id(block_id, "block"))
    return await agents_where(
        gw,
        "id IN (SELECT agent_id FROM agent_blocks WHERE block_id = {})",
        block_id,
        before,
        after,
        order,
        limit,
    )


async def agent_block(gw: Gateway, agent_id: str, label: str) -> dict[str, Any]:
    await gw.agent_row(checked_id(agent_id, "agent"))
    for b in await blocks_of(gw, agent_id):
        if b["label"] == label:
            return b
    raise HTTPException(404, f"Block with label '{label}' not found for agent {agent_id}")


@route(router, "GET", "/v1/agents/{agent_id}/core-memory/blocks/{label}")
async def get_agent_block(agent_id: str, label: str, gw: GW) -> dict[str, Any]:
    return render.block(await agent_block(gw, agent_id, label))


@route(router, "PATCH", "/v1/agents/{agent_id}/core-memory/blocks/{label}")
async def update_agent_block(
    agent_id: str,
    label: str,
    body: UpdateBlockBody,
    gw: GW,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    block = await agent_block(gw, agent_id, label)
    return await update(gw, block["id"], body, idempotency_key)


@route(router, "PATCH", "/v1/agents/{agent_id}/core-memory/blocks/attach/{block_id}")
async def attach_block(agent_id: str, block_id: str, gw: GW) -> dict[str, Any]:
    checked_id(agent_id, "agent")
    block = await block_row(gw, checked_id(block_id, "block"))
    seq = await change_agent(gw, AttachBlock(agent_id, block_id, label=block["label"]))
    seq = max(seq, await sleeptime.attach_to_companions(gw, agent_id, block_id, block["label"]))
    await gw.visible(seq, AGENTS, MEMORY)
    return await agent_state(gw, agent_id)


@route(router, "PATCH", "/v1/agents/{agent_id}/core-memory/blocks/detach/{block_id}")
async def detach_block(agent_id: str, block_id: str, gw: GW) -> dict[str, Any]:
    command = DetachBlock(checked_id(agent_id, "agent"), checked_id(block_id, "block"))
    seq = await change_agent(gw, command)
    await gw.visible(seq, AGENTS, MEMORY)
    return await agent_state(gw, agent_id)


# Block history: an O extension. Every change is a BlockUpdated event, so every
# version is kept; restoring one appends a new version with its fields.


@route(router, "GET", "/v1/blocks/{block_id}/versions")
async def list_versions(block_id: str, gw: GW) -> list[dict[str, Any]]:
    await block_row(gw, checked_id(block_id, "block"))
    rows = await gw.pool.fetch(
        "SELECT version, value, changes, actor, agent_id, tool_name, restored_from, created_at"
        " FROM block_versions WHERE block_id = $1 ORDER BY version",
        block_id,
    )
    return [
        {
            "block_id": block_id,
            "version": r["version"],
            "value": r["value"],
            "changes": r["changes"],
            "actor": r["actor"],
            "agent_id": r["agent_id"],
            "tool_name": r["tool_name"],
            "restored_from": r["restored_from"],
            "created_at": r["created_at"].isoformat(),
        }
        for r in rows
    ]


@route(router, "POST", "/v1/blocks/{block_id}/versions/{version}/restore")
async def restore_version(block_id: str, version: int, gw: GW) -> dict[str, Any]:
    await block_row(gw, checked_id(block_id, "block"))
    if version < 1:
        raise HTTPException(422, "version must be >= 1")
    reply = await memory_command(
        gw, RestoreBlockVersion(block_id=block_id, version=version), block_id
    )
    await gw.visible(reply.seq, MEMORY)
    return render.block(await block_row(gw, block_id))
