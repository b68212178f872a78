"""Agents: create, list, count, get, update, delete (Letta v1 shapes)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import asyncpg
from fastapi import APIRouter, HTTPException, Query

from o_contracts import subjects
from o_contracts.base import Event
from o_contracts.base_tools import BASE_TOOLS, SCHEMAS
from o_contracts.commands import CreateBlock
from o_contracts.envelope import Envelope
from o_contracts.events import AgentCreated, AgentDeleted, AgentUpdated
from o_contracts.memory_stream import InvalidStreamSettings, StreamSettings
from o_contracts.models import BlockSpec, ChatMessage, ToolRule
from o_contracts.prompts import default_system
from o_contracts.tool_rules import InvalidToolRule, validate_rules
from o_gateway import render
from o_gateway.commands import PRODUCER, memory_command
from o_gateway.idempotency import IdempotencyKey, checked_key, resource_id
from o_gateway.models_config import embedding_config_for, llm_config_for, llm_config_from_body
from o_gateway.pagination import Listing
from o_gateway.routes.paths import route
from o_gateway.schemas import CreateAgentBody, CreateBlockBody, ToolRuleBody, UpdateAgentBody
from o_gateway.state import GW, Gateway, checked_id
from o_gateway.tool_registry import BUILTIN_IDS, user_tool_by_name, user_tools
from o_runtime.eventlog import AppendRejected, ConcurrencyConflict
from o_runtime.tool_secrets import SecretsUnavailable, encrypt_all

router = APIRouter()

DEFAULT_DESCRIPTIONS = {
    "persona": "The persona block: Stores details about your current persona, guiding how you "
    "behave and respond. This helps you to maintain consistency and personality in your "
    "interactions.",
    "human": "The human block: Stores key details about the person you are conversing with, "
    "allowing for more personalized and friend-like conversation.",
}
_ADJ = ("bright", "calm", "eager", "gentle", "keen", "lucky", "quiet", "swift")
_NOUN = ("otter", "falcon", "maple", "comet", "harbor", "lantern", "meadow", "summit")


def checked_rules(rules: list[ToolRuleBody]) -> list[dict[str, Any]]:
    dumped = [r.model_dump() for r in rules]
    try:
        validate_rules(dumped)
    except InvalidToolRule as exc:
        raise HTTPException(422, str(exc)) from exc
    return dumped


async def agent_state(gw: Gateway, agent_id: str) -> dict[str, Any]:
    row = await gw.agent_row(agent_id)
    return await render_agent(gw, row)


async def render_agent(gw: Gateway, row: dict[str, Any]) -> dict[str, Any]:
    tools = await user_tools(gw, list(row.get("tool_ids") or []))
    state = render.agent(row, await blocks_of(gw, row["id"]), tools)
    state["pending_approval"] = await pending_approval(gw, row["id"], row["agent_type"])
    state |= await last_run(gw, row["id"])
    return state


async def last_run(gw: Gateway, agent_id: str) -> dict[str, Any]:
    """Letta's last_stop_reason, last_run_completion and last_run_duration_ms.

    From the runs projection (runs of one agent finish in the order they were
    created), not copied into the agent's row: that copy cost the agents
    projection a transaction per run, on every run's critical path.
    """
    row = await gw.pool.fetchrow(
        "SELECT stop_reason, created_at, completed_at FROM runs"
        " WHERE agent_id = $1 AND completed_at IS NOT NULL ORDER BY created_at DESC LIMIT 1",
        agent_id,
    )
    if row is None:
        return {"last_stop_reason": None, "last_run_completion": None, "last_run_duration_ms": None}
    took = row["completed_at"] - row["created_at"]
    return {
        "last_stop_reason": row["stop_reason"],
        "last_run_completion": render.iso(row["completed_at"]),
        "last_run_duration_ms": max(0, round(took.total_seconds() * 1000)),
    }


async def pending_approval(gw: Gateway, agent_id: str, agent_type: str) -> dict[str, Any] | None:
    """The approval_request_message the agent waits on, if any (Letta's AgentState field)."""
    row = await gw.pool.fetchrow(
        "SELECT m.body, m.created_at, m.run_id, m.step_id FROM pending_approvals p"
        " JOIN messages m ON m.id = p.message_id WHERE p.agent_id = $1 ORDER BY p.seq LIMIT 1",
        agent_id,
    )
    if row is None:
        return None
    message = ChatMessage.model_validate(row["body"])
    rendered = render.letta_messages(
        message, row["created_at"], row["run_id"], row["step_id"], agent_type
    )
    return next((m for m in rendered if m["message_type"] == "approval_request_message"), None)


async def blocks_of(
    gw: Gateway, agent_id: str, conn: asyncpg.Connection | None = None
) -> list[dict[str, Any]]:
    rows = await (conn or gw.pool).fetch(
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


async def resolve_tools(
    gw: Gateway, base: list[str], names: list[str], tool_ids: list[str]
) -> tuple[list[str], list[str]]:
    """Built-in tool names and user tool ids from tools given by name and by id."""
    builtins = list(base)
    user_ids: list[str] = []
    for name in names:
        if name in SCHEMAS:
            builtins.append(name)
            continue
        row = await user_tool_by_name(gw, name)
        if row is None:
            raise HTTPException(400, f"unknown tool '{name}'")
        user_ids.append(row["id"])
    for tool_id in tool_ids:
        checked_id(tool_id, "tool")
        if tool_id in BUILTIN_IDS:
            builtins.append(BUILTIN_IDS[tool_id])
        else:
            user_ids.append(tool_id)
    found = await user_tools(gw, user_ids)
    missing = set(user_ids) - {r["id"] for r in found}
    if missing:
        raise HTTPException(404, f"Tool {sorted(missing)[0]} not found")
    unique_builtins = list(dict.fromkeys(builtins))
    unique_ids = list(dict.fromkeys(user_ids))
    check_unique_names(unique_builtins, [r["name"] for r in await user_tools(gw, unique_ids)])
    return unique_builtins, unique_ids


def check_unique_names(builtins: list[str], user_names: list[str]) -> None:
    # The model calls tools by name: two tools of one agent cannot share one.
    seen = set(builtins)
    for name in user_names:
        if name in seen:
            raise HTTPException(409, f"the agent already has a tool named '{name}'")
        seen.add(name)


def secrets_of(env: dict[str, str] | None, secrets: dict[str, str] | None) -> dict[str, str] | None:
    """Both Letta spellings, encrypted; None when the body set neither."""
    if env is None and secrets is None:
        return None
    try:
        return encrypt_all({**(env or {}), **(secrets or {})})
    except SecretsUnavailable as exc:
        raise HTTPException(400, str(exc)) from exc


def checked_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """Metadata as given; its memory-stream settings (archival ranking) must be valid."""
    try:
        StreamSettings.from_metadata(metadata)
    except InvalidStreamSettings as exc:
        raise HTTPException(400, str(exc)) from exc
    return metadata or {}


@route(router, "POST", "/v1/agents/")
async def create_agent(
    body: CreateAgentBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    key = checked_key(idempotency_key)
    if body.llm_config:
        llm_config = llm_config_from_body(body.llm_config)
    elif body.model:
        llm_config = llm_config_for(body.model, body.context_window_limit)
    else:
        raise HTTPException(400, "Must specify either model or llm_config")
    embedding_config = (
        embedding_config_for(body.embedding) if body.embedding else body.embedding_config
    )
    base = list(BASE_TOOLS.get(body.agent_type, [])) if body.include_base_tools else []
    tools, tool_ids = await resolve_tools(gw, base, body.tools, body.tool_ids)
    encrypted = secrets_of(body.tool_exec_environment_variables, body.secrets) or {}
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
    agent_id = resource_id("agent", key)
    # Blocks first: the agent's creation event only names blocks that exist.
    # (With an Idempotency-Key, a retry names the same blocks and commands.)
    new_block_ids = [resource_id("block", key, agent_id, str(i)) for i in range(len(specs))]
    replies = await asyncio.gather(
        *(
            memory_command(
                gw,
                CreateBlock(block_id=bid, spec=s),
                bid,
                command_id=resource_id("cmd", key, bid) if key else None,
            )
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
        tool_rules=[ToolRule.model_validate(r) for r in checked_rules(body.tool_rules)]
        + [
            # Tools that ask for approval by default do so for this agent (Letta's rule).
            ToolRule(type="requires_approval", tool_name=t["name"])
            for t in await user_tools(gw, tool_ids)
            if t["default_requires_approval"]
        ],
        block_ids=new_block_ids + block_ids,
        tags=body.tags,
        metadata=checked_metadata(body.metadata),
        description=body.description,
        timezone=body.timezone or "UTC",
        tool_ids=tool_ids,
        encrypted_secrets=encrypted,
    )
    try:
        appended = await gw.eventlog.append(
            subjects.agent_subject(agent_id),
            Envelope.wrap(event, aggregate_id=agent_id, producer=PRODUCER),
            expected_last_seq=0,
        )
        seq = appended.seq
    except ConcurrencyConflict:
        if key is None:
            raise
        # Created by the first try of this request: answered as it was.
        seq = await gw.eventlog.last_seq(subjects.agent_subject(agent_id))
    await gw.visible(max([seq, *(r.seq or 0 for r in replies)]), "agents", "memory")
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
    q = Listing("agents")
    if name is not None:
        q.filter("name = {}", name)
    if query_text:
        q.filter("name ILIKE {}", f"%{query_text}%")
    if tags:
        q.filter(f"tags {'@>' if match_all_tags else '&&'} {{}}", tags)
    rows = await q.page(gw.pool, "agent", before, after, order, limit)
    return [await render_agent(gw, dict(r)) for r in rows]


@route(router, "GET", "/v1/agents/count")
async def count_agents(gw: GW) -> int:
    count: int = await gw.pool.fetchval("SELECT count(*) FROM agents")
    return count


@route(router, "GET", "/v1/agents/{agent_id}")
async def get_agent(agent_id: str, gw: GW) -> dict[str, Any]:
    return await agent_state(gw, checked_id(agent_id, "agent"))


# Decides the event about an agent, given its row and a connection on which the
# agent's projections show the agent's subject as it is now.
EventFor = Callable[[dict[str, Any], asyncpg.Connection], Awaitable[Event | None]]


async def change_agent(gw: Gateway, agent_id: str, event_for: EventFor) -> int:
    """Append an event about an existing agent, decided on its current state."""
    subject = subjects.agent_subject(agent_id)

    async def decide(last: int) -> Envelope[Any] | None:
        async with gw.reads.at(last, "agents", "memory") as conn:
            row = await conn.fetchrow("SELECT * FROM agents WHERE id = $1", agent_id)
            if row is None:
                raise AppendRejected(f"Agent {agent_id} not found", 404)
            event = await event_for(dict(row), conn)
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
        changes["tool_rules"] = checked_rules(body.tool_rules)
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
    if body.tool_ids is not None:
        # Letta's update replaces the agent's whole tool list.
        changes["tools"], changes["tool_ids"] = await resolve_tools(gw, [], [], body.tool_ids)
    encrypted = secrets_of(body.tool_exec_environment_variables, body.secrets)
    if encrypted is not None:
        changes["encrypted_secrets"] = encrypted

    async def event_for(_row: dict[str, Any], _conn: asyncpg.Connection) -> AgentUpdated | None:
        return AgentUpdated(agent_id=agent_id, changes=changes) if changes else None

    seq = await change_agent(gw, agent_id, event_for)
    await gw.visible(seq, "agents", "memory")
    return await agent_state(gw, agent_id)


@route(router, "DELETE", "/v1/agents/{agent_id}")
async def delete_agent(agent_id: str, gw: GW) -> dict[str, Any]:
    checked_id(agent_id, "agent")

    async def event_for(_row: dict[str, Any], _conn: asyncpg.Connection) -> AgentDeleted:
        return AgentDeleted(agent_id=agent_id)

    seq = await change_agent(gw, agent_id, event_for)
    await gw.visible(seq, "agents", "memory", "archival")
    return {"message": f"Agent id={agent_id} successfully deleted"}
