"""Multi-agent groups: `/v1/groups/` (list, count, get, create, modify, delete, messages)
and `/v1/agents/{agent_id}/groups` (Letta's shapes).

A group is its own aggregate (`o.evt.group.<id>`): the gateway decides its
registry events here. The sleep-time groups the gateway makes for
`enable_sleeptime` are ordinary groups (o_gateway/sleeptime.py); their turns are
counted by the evolution service (o_evolution/sleeptime.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from o_contracts import subjects
from o_contracts.events import GroupCreated, GroupDeleted, GroupUpdated
from o_contracts.ids import new_id
from o_contracts.projection_names import GROUPS
from o_gateway.commands import append_decided
from o_gateway.group_reads import group_row, render_group
from o_gateway.group_schemas import CreateGroupBody, ManagerConfig, UpdateGroupBody
from o_gateway.pagination import Listing
from o_gateway.routes.messages import list_messages
from o_gateway.routes.paths import route
from o_gateway.state import GW, Gateway, checked_id

router = APIRouter()

ManagerTypeQuery = Literal["round_robin", "supervisor", "dynamic", "sleeptime"]


async def existing_agents(gw: Gateway, agent_ids: list[str]) -> list[str]:
    """The ids, each once, all of existing agents (else 404 naming the first missing)."""
    ids = list(dict.fromkeys(checked_id(a, "agent") for a in agent_ids))
    found = {r["id"] for r in await gw.pool.fetch("SELECT id FROM agents WHERE id = ANY($1)", ids)}
    missing = [a for a in ids if a not in found]
    if missing:
        raise HTTPException(404, f"Agent {missing[0]} not found")
    return ids


def config_fields(config: ManagerConfig) -> dict[str, Any]:
    """The group fields a manager_config sets (those it gives; None leaves a field)."""
    fields = config.model_dump(exclude={"manager_type"}, exclude_none=True)
    return {k: v for k, v in fields.items() if k in _CONFIG_FIELDS}


_CONFIG_FIELDS = ("manager_agent_id", "sleeptime_agent_frequency", "max_turns", "termination_token")
# Which manager types need a manager agent (Letta's required manager_agent_id).
_NEEDS_MANAGER = ("supervisor", "dynamic", "sleeptime")


async def checked_manager(gw: Gateway, manager_type: str, fields: dict[str, Any]) -> None:
    manager = fields.get("manager_agent_id")
    if manager is None:
        if manager_type in _NEEDS_MANAGER:
            raise HTTPException(
                422, f"manager_config.manager_agent_id is required for {manager_type}"
            )
        return
    await existing_agents(gw, [manager])


async def appended(gw: Gateway, group_id: str, event: Any, expected: int | None) -> int:
    subject = subjects.group_subject(group_id)
    return await append_decided(
        gw.eventlog, subject, group_id, event, expected, f"group {group_id}"
    )


async def group_or_404(gw: Gateway, group_id: str) -> Any:
    row = await group_row(gw.pool, checked_id(group_id, "group"))
    if row is None:
        raise HTTPException(404, f"Group {group_id} not found")
    return row


@route(router, "POST", "/v1/groups/")
async def create_group(body: CreateGroupBody, gw: GW) -> dict[str, Any]:
    config = body.manager_config
    fields = config_fields(config)
    if config.manager_type == "dynamic":
        fields.setdefault("termination_token", "DONE!")
    await checked_manager(gw, config.manager_type, fields)
    agent_ids = await existing_agents(gw, body.agent_ids)
    group_id = new_id("group")
    event = GroupCreated(
        group_id=group_id,
        manager_type=config.manager_type,
        agent_ids=agent_ids,
        description=body.description,
        hidden=body.hidden,
        **fields,
    )
    await gw.visible(await appended(gw, group_id, event, 0), GROUPS)
    return await render_group(gw.pool, await group_row(gw.pool, group_id))


@route(router, "GET", "/v1/groups/")
async def list_groups(
    gw: GW,
    manager_type: ManagerTypeQuery | None = None,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
    show_hidden_groups: bool | None = None,
    project_id: str | None = None,
) -> list[dict[str, Any]]:
    q = Listing("groups")
    if manager_type is not None:
        q.filter("manager_type = {}", manager_type)
    if not show_hidden_groups:
        q.filter("hidden IS NOT TRUE")
    rows = await q.page(gw.pool, "group", before, after, order, limit)
    return [await render_group(gw.pool, r) for r in rows]


@route(router, "GET", "/v1/groups/count")
async def count_groups(gw: GW) -> int:
    return await Listing("groups").count(gw.pool)


@route(router, "GET", "/v1/groups/{group_id}")
async def retrieve_group(group_id: str, gw: GW) -> dict[str, Any]:
    return await render_group(gw.pool, await group_or_404(gw, group_id))


@route(router, "PATCH", "/v1/groups/{group_id}")
async def modify_group(group_id: str, body: UpdateGroupBody, gw: GW) -> dict[str, Any]:
    row = await group_or_404(gw, group_id)
    changes: dict[str, Any] = {}
    if body.manager_config is not None:
        if body.manager_config.manager_type != row["manager_type"]:
            raise HTTPException(
                400,
                f"Cannot change group pattern after creation (group {group_id} is"
                f" {row['manager_type']}, not {body.manager_config.manager_type})",
            )
        changes |= config_fields(body.manager_config)
        if "manager_agent_id" in changes:
            await existing_agents(gw, [changes["manager_agent_id"]])
    if body.description:
        changes["description"] = body.description
    if body.agent_ids:
        changes["agent_ids"] = await existing_agents(gw, body.agent_ids)
    if changes:
        event = GroupUpdated(group_id=group_id, changes=changes)
        await gw.visible(await appended(gw, group_id, event, row["last_seq"]), GROUPS)
        row = await group_row(gw.pool, group_id)
    return await render_group(gw.pool, row)


@route(router, "DELETE", "/v1/groups/{group_id}")
async def delete_group(group_id: str, gw: GW) -> dict[str, Any]:
    row = await group_or_404(gw, group_id)
    seq = await appended(gw, group_id, GroupDeleted(group_id=group_id), row["last_seq"])
    await gw.visible(seq, GROUPS)
    return {"message": f"Group id={group_id} successfully deleted"}


@route(router, "GET", "/v1/groups/{group_id}/messages")
async def list_group_messages(
    group_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    order: Literal["asc", "desc"] = "desc",
    use_assistant_message: bool = True,
) -> list[dict[str, Any]]:
    """A group with a manager shows its manager's messages (Letta's); one without shows
    its first agent's (O runs no group loop of its own: docs/sleeptime.md)."""
    row = await group_or_404(gw, group_id)
    agent_id = row["manager_agent_id"] or (row["agent_ids"][0] if row["agent_ids"] else None)
    if agent_id is None:
        return []
    rendered: list[dict[str, Any]] = await list_messages(
        agent_id, gw, before, after, limit, order, use_assistant_message=use_assistant_message
    )
    return rendered


@route(router, "GET", "/v1/agents/{agent_id}/groups")
async def list_agent_groups(
    agent_id: str,
    gw: GW,
    manager_type: ManagerTypeQuery | None = None,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Literal["asc", "desc"] = "desc",
) -> list[dict[str, Any]]:
    """The groups an agent is in: as a participant or as their manager."""
    await gw.agent_row(checked_id(agent_id, "agent"))
    q = Listing("groups")
    q.filter("({} = ANY(agent_ids) OR manager_agent_id = {})", agent_id, agent_id)
    if manager_type is not None:
        q.filter("manager_type = {}", manager_type)
    rows = await q.page(gw.pool, "group", before, after, order, limit)
    return [await render_group(gw.pool, r) for r in rows]
