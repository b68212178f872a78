"""Agents: create, list, count, get, update, delete (Letta v1 shapes)."""

from __future__ import annotations

import asyncio
import random
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query

from o_contracts import subjects
from o_contracts.base_tools import BASE_TOOLS, SCHEMAS
from o_contracts.commands import CreateBlock
from o_contracts.envelope import Envelope
from o_contracts.events import AgentCreated, AgentDeleted, AgentUpdated
from o_contracts.ids import new_id
from o_contracts.memory_stream import InvalidStreamSettings, StreamSettings
from o_contracts.models import BlockSpec, ToolRule
from o_contracts.prompts import default_system
from o_gateway import render
from o_gateway.commands import PRODUCER, memory_command
from o_gateway.models_config import embedding_config_for, llm_config_for, llm_config_from_body
from o_gateway.routes.paths import route
from o_gateway.schemas import CreateAgentBody, CreateBlockBody, UpdateAgentBody
from o_gateway.state import Gateway, checked_id, gateway
from o_runtime.eventlog import AppendRejected

router = APIRouter()
GW = Annotated[Gateway, Depends(gateway)]

DEFAULT_DESCRIPTIONS = {
    "persona": "The persona block: Stores details about your current persona, guiding how you "
    "behave and respond. This helps you to maintain consistency and personality in your "
    "interactions.",
    "human": "The human block: Stores key details about the person you are conversing with, "
    "allowing for more personalized and friend-like conversation.",
}
_ADJ = ("bright", "calm", "eager", "gentle", "keen", "lucky", "quiet", "swift")
_NOUN = ("otter", "falcon", "maple", "comet", "harbor", "lantern", "meadow", "summit")


async def agent_state(gw: Gateway, agent_id: str) -> dict[str, Any]:
    row = await gw.agent_row(agent_id)
    return render.agent(row, await blocks_of(gw, agent_id))


async def blocks_of(gw: Gateway, agent_id: str) -> list[dict[str, Any]]:
    rows = await gw.pool.fetch(
        "SELECT b.* FROM agent_blocks ab JOIN blocks b ON b.id = ab.block_id"
        " WHERE ab.agent_id = $1 ORDER BY ab.position, b.id",
        agent_id,
    )
    return [dict(r) for r in rows]


def block_spec(body: CreateBlockBody) -> BlockSpec:
    if len(body.value) > body.limit:
        raise HTTPException(
            400,
            f"block '{body.label}' value is {len(body.value)} characters, over its limit "
            f"of {body.limit}",
        )
    return BlockSpec(
        label=body.label,
        value=body.value,
        limit=body.limit,
        description=body.description or DEFAULT_DESCRIPTIONS.get(body.label),
        read_only=body.read_only,
        metadata=body.metadata or {},
        tags=body.tags or [],
    )


def checked_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """Metadata as given; its memory-stream settings (archival ranking) must be valid."""
    try:
        StreamSettings.from_metadata(metadata)
    except InvalidStreamSettings as exc:
        raise HTTPException(400, str(exc)) from exc
    return metadata or {}


def resolve_tools(body: CreateAgentBody) -> list[str]:
    names = list(BASE_TOOLS.get(body.agent_type, [])) if body.include_base_tools else []
    for name in body.tools:
        if name not in SCHEMAS:
            raise HTTPException(400, f"unknown tool '{name}' (custom tools arrive with /v1/tools)")
        if name not in names:
            names.append(name)
    if body.tool_ids:
        raise HTTPException(400, "tool_ids are not supported yet: attach built-in tools by name")
    return names


@route(router, "POST", "/v1/agents/")
async def create_agent(body: CreateAgentBody, gw: GW) -> dict[str, Any]:
    if body.llm_config:
        llm_config = llm_config_from_body(body.llm_config)
    elif body.model:
        llm_config = llm_config_for(body.model, body.context_window_limit)
    else:
        raise HTTPException(400, "Must specify either model or llm_config")
    embedding_config = (
        embedding_config_for(body.embedding) if body.embedding else body.embedding_config
    )
    tools = resolve_tools(body)
    labels = [b.label for b in body.memory_blocks]
    if len(set(labels)) != len(labels):
        raise HTTPException(400, "memory_blocks have duplicate labels")
    specs = [block_spec(b) for b in body.memory_blocks]
    block_ids = [checked_id(b, "block") for b in body.block_ids]
    if block_ids:
        found = await gw.pool.fetch("SELECT id, label FROM blocks WHERE id = ANY($1)", block_ids)
        missing = set(block_ids) - {r["id"] for r in found}
        if missing:
            raise HTTPException(404, f"Block {sorted(missing)[0]} not found")
        clash = set(labels) & {r["label"] for r in found}
        if clash:
            raise HTTPException(400, f"duplicate block label '{sorted(clash)[0]}'")
    agent_id = new_id("agent")
    # Blocks first: the agent's creation event only names blocks that exist.
    new_block_ids = [new_id("block") for _ in specs]
    replies = await asyncio.gather(
        *(
            memory_command(gw, CreateBlock(block_id=bid, spec=s), bid)
            for bid, s in zip(new_block_ids, specs, strict=True)
        )
    )
    event = AgentCreated(
        agent_id=agent_id,
        name=body.name or f"{random.choice(_ADJ)}-{random.choice(_NOUN)}",
        system=body.system if body.system is not None else default_system(body.agent_type),
        agent_type=body.agent_type,
        llm_config=llm_config,
        embedding_config=embedding_config,
        tools=tools,
        tool_rules=[ToolRule.model_validate(r.model_dump()) for r in body.tool_rules],
        block_ids=new_block_ids + block_ids,
        tags=body.tags,
        metadata=checked_metadata(body.metadata),
        description=body.description,
        timezone=body.timezone or "UTC",
    )
    appended = await gw.eventlog.append(
        subjects.agent_subject(agent_id),
        Envelope.wrap(event, aggregate_id=agent_id, producer=PRODUCER),
        expected_last_seq=0,
    )
    await gw.visible(max([appended.seq, *(r.seq or 0 for r in replies)]), "agents", "memory")
    return await agent_state(gw, agent_id)


@route(router, "GET", "/v1/agents/")
async def list_agents(
    gw: GW,
    name: str | None = None,
    tags: Annotated[list[str] | None, Query()] = None,
    match_all_tags: bool = False,
    query_text: str | None = None,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
) -> list[dict[str, Any]]:
    where: list[str] = ["true"]
    args: list[object] = []
    if name is not None:
        args.append(name)
        where.append(f"name = ${len(args)}")
    if query_text:
        args.append(f"%{query_text}%")
        where.append(f"name ILIKE ${len(args)}")
    if tags:
        args.append(tags)
        where.append(f"tags {'@>' if match_all_tags else '&&'} ${len(args)}")
    for cursor, op in (
        (after, ">" if order == "asc" else "<"),
        (before, "<" if order == "asc" else ">"),
    ):
        if cursor:
            checked_id(cursor, "agent")
            args.append(cursor)
            where.append(
                f"(created_at, id) {op} (SELECT created_at, id FROM agents WHERE id = ${len(args)})"
            )
    direction = "ASC" if order == "asc" else "DESC"
    args.append(limit)
    rows = await gw.pool.fetch(
        f"SELECT * FROM agents WHERE {' AND '.join(where)}"
        f" ORDER BY created_at {direction}, id {direction} LIMIT ${len(args)}",
        *args,
    )
    return [render.agent(dict(r), await blocks_of(gw, r["id"])) for r in rows]


@route(router, "GET", "/v1/agents/count")
async def count_agents(gw: GW) -> int:
    count: int = await gw.pool.fetchval("SELECT count(*) FROM agents")
    return count


@route(router, "GET", "/v1/agents/{agent_id}")
async def get_agent(agent_id: str, gw: GW) -> dict[str, Any]:
    return await agent_state(gw, checked_id(agent_id, "agent"))


async def change_agent(gw: Gateway, agent_id: str, event_for: Any) -> int:
    """Append an event about an existing agent, decided on its current state."""
    subject = subjects.agent_subject(agent_id)

    async def decide(last: int) -> Envelope[Any] | None:
        await gw.visible(last, "agents", "memory")
        row = await gw.pool.fetchrow("SELECT * FROM agents WHERE id = $1", agent_id)
        if row is None:
            raise AppendRejected(f"Agent {agent_id} not found", 404)
        event = await event_for(dict(row))
        if event is None:
            return None
        return Envelope.wrap(event, aggregate_id=agent_id, producer=PRODUCER)

    appended = await gw.eventlog.append_decided(subject, decide)
    return appended.seq if appended else 0


@route(router, "PATCH", "/v1/agents/{agent_id}")
async def update_agent(agent_id: str, body: UpdateAgentBody, gw: GW) -> dict[str, Any]:
    checked_id(agent_id, "agent")
    fields = body.model_dump(exclude_unset=True)
    changes: dict[str, Any] = {}
    for key in ("name", "system", "tags", "metadata", "description", "timezone"):
        if key in fields and fields[key] is not None:
            changes[key] = fields[key]
    if "metadata" in changes:
        checked_metadata(changes["metadata"])
    if body.tool_rules is not None:
        changes["tool_rules"] = [r.model_dump() for r in body.tool_rules]
    if body.llm_config is not None:
        changes["llm_config"] = llm_config_from_body(body.llm_config)
    elif body.model is not None:
        changes["llm_config"] = llm_config_for(body.model, body.context_window_limit)
    if body.embedding is not None:
        changes["embedding_config"] = embedding_config_for(body.embedding)
    elif body.embedding_config is not None:
        changes["embedding_config"] = body.embedding_config
    if body.block_ids is not None:
        ids = [checked_id(b, "block") for b in body.block_ids]
        found = await gw.pool.fetch("SELECT id, label FROM blocks WHERE id = ANY($1)", ids)
        missing = set(ids) - {r["id"] for r in found}
        if missing:
            raise HTTPException(404, f"Block {sorted(missing)[0]} not found")
        labels = [r["label"] for r in found]
        clash = sorted({label for label in labels if labels.count(label) > 1})
        if clash:
            raise HTTPException(409, f"block_ids hold two blocks labelled '{clash[0]}'")
        changes["block_ids"] = list(dict.fromkeys(ids))

    async def event_for(_row: dict[str, Any]) -> AgentUpdated | None:
        return AgentUpdated(agent_id=agent_id, changes=changes) if changes else None

    seq = await change_agent(gw, agent_id, event_for)
    await gw.visible(seq, "agents", "memory")
    return await agent_state(gw, agent_id)


@route(router, "DELETE", "/v1/agents/{agent_id}")
async def delete_agent(agent_id: str, gw: GW) -> dict[str, Any]:
    checked_id(agent_id, "agent")

    async def event_for(_row: dict[str, Any]) -> AgentDeleted:
        return AgentDeleted(agent_id=agent_id)

    seq = await change_agent(gw, agent_id, event_for)
    await gw.visible(seq, "agents", "memory", "archival")
    return {"message": f"Agent id={agent_id} successfully deleted"}
