"""Agents: create, list, count, get, update, delete (Letta v1 shapes).

Routes parse the request into a command (o_gateway.agent_requests), have it
decided and appended (o_gateway.decisions) and render the agent (o_gateway.agent_reads).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from o_contracts.ids import derived_id
from o_contracts.projection_names import AGENTS, ARCHIVAL, MEMORY, RUNS
from o_gateway import agent_requests, decisions, sleeptime
from o_gateway.agent_reads import agent_state, render_agent
from o_gateway.idempotency import IdempotencyKey, checked_key
from o_gateway.identity_reads import by_identity
from o_gateway.pagination import Listing
from o_gateway.routes.identities import (
    check_identities,
    link_agent_once,
    set_agent_identities,
)
from o_gateway.routes.paths import route
from o_gateway.schemas import CreateAgentBody, UpdateAgentBody
from o_gateway.state import GW, checked_id

router = APIRouter()


@route(router, "POST", "/v1/agents/")
async def create_agent(
    body: CreateAgentBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    identity_ids = await check_identities(gw, body.identity_ids or [])
    key = checked_key(idempotency_key)
    command = await agent_requests.create_agent(gw, body, key)
    seq = await decisions.create_agent(gw, command)
    if key is not None:
        # A retry links what its first try had not, and nothing it had: an identity the
        # agent left since stays left (setting them all again used to undo that).
        for identity_id in identity_ids:
            link = derived_id("evt", command.agent_id, key, "identity", identity_id)
            await link_agent_once(gw, identity_id, command.agent_id, link)
    elif identity_ids:
        await set_agent_identities(gw, command.agent_id, identity_ids)
    # (RUNS: the agent's first messages, for message_ids)
    await gw.visible(seq, AGENTS, MEMORY, RUNS)
    if body.enable_sleeptime and body.agent_type != "sleeptime_agent":
        await sleeptime.enable(gw, command.agent_id)
    return await agent_state(gw, command.agent_id)


def filtered(
    q: Listing,
    name: str | None,
    tags: list[str] | None,
    match_all_tags: bool,
    query_text: str | None,
    identity_id: str | None = None,
    identifier_keys: list[str] | None = None,
) -> Listing:
    """Letta's agent filters, shared by the list and the count."""
    by_identity(q, "identity_agents", identity_id, identifier_keys)
    if name is not None:
        q.filter("name = {}", name)
    if query_text:
        q.filter("name ILIKE {}", f"%{query_text}%")
    if tags:
        q.filter(f"tags {'@>' if match_all_tags else '&&'} {{}}", tags)
    return q


@route(router, "GET", "/v1/agents/")
async def list_agents(
    gw: GW,
    name: str | None = None,
    tags: Annotated[list[str] | None, Query()] = None,
    match_all_tags: bool = False,
    query_text: str | None = None,
    identity_id: str | None = None,
    identifier_keys: Annotated[list[str] | None, Query()] = None,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at", "updated_at", "last_run_completion"] = "created_at",
) -> list[dict[str, Any]]:
    # last_run_completion lives in the runs projection, not the agents row: such
    # a listing is by creation time.
    q = Listing("agents", key="updated_at, id" if order_by == "updated_at" else "created_at, id")
    filtered(q, name, tags, match_all_tags, query_text, identity_id, identifier_keys)
    rows = await q.page(gw.pool, "agent", before, after, order, limit)
    return [await render_agent(gw, dict(r)) for r in rows]


@route(router, "GET", "/v1/agents/count")
async def count_agents(
    gw: GW,
    name: str | None = None,
    tags: Annotated[list[str] | None, Query()] = None,
    match_all_tags: bool = False,
    query_text: str | None = None,
    identity_id: str | None = None,
    identifier_keys: Annotated[list[str] | None, Query()] = None,
) -> int:
    q = filtered(
        Listing("agents"), name, tags, match_all_tags, query_text, identity_id, identifier_keys
    )
    return await q.count(gw.pool)


@route(router, "GET", "/v1/agents/{agent_id}")
async def get_agent(agent_id: str, gw: GW) -> dict[str, Any]:
    return await agent_state(gw, checked_id(agent_id, "agent"))


@route(router, "PATCH", "/v1/agents/{agent_id}")
async def update_agent(agent_id: str, body: UpdateAgentBody, gw: GW) -> dict[str, Any]:
    identity_ids = await check_identities(gw, body.identity_ids or [])
    command = await agent_requests.update_agent(gw, checked_id(agent_id, "agent"), body)
    seq = await decisions.change_agent(gw, command)
    await gw.visible(seq, AGENTS, MEMORY)
    if body.identity_ids is not None:
        await set_agent_identities(gw, agent_id, identity_ids)
    if body.enable_sleeptime is not None:
        change = sleeptime.enable if body.enable_sleeptime else sleeptime.disable
        await change(gw, agent_id)
    return await agent_state(gw, agent_id)


@route(router, "DELETE", "/v1/agents/{agent_id}")
async def delete_agent(agent_id: str, gw: GW) -> dict[str, Any]:
    checked_id(agent_id, "agent")
    # Its sleep-time companions and group go with it; a companion takes its group along.
    await sleeptime.disable(gw, agent_id)
    await sleeptime.leave_group(gw, agent_id)
    seq = await decisions.change_agent(gw, decisions.DeleteAgent(agent_id))
    await gw.visible(seq, AGENTS, MEMORY, ARCHIVAL)
    return {"message": f"Agent id={agent_id} successfully deleted"}
