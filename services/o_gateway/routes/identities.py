"""`/v1/identities/`: the people and organisations an application's agents serve (Letta's
identities), and their attach and detach routes on agents and blocks.

An identity is its own aggregate (`o.evt.identity.<id>`, events/identities.py), decided
here on its row as read: a change meanwhile is a 409, never a lost update. The agents and
blocks it has are part of it, so attaching from either side is one event of the identity.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from fastapi import Body as InBody
from pydantic import BaseModel, ConfigDict, Field

from o_contracts import subjects
from o_contracts.events import IdentityCreated, IdentityDeleted, IdentityUpdated
from o_contracts.limits import MAX_LIST_ITEMS
from o_contracts.projection_names import IDENTITIES
from o_gateway import render
from o_gateway.agent_reads import agents_where
from o_gateway.commands import append_visible
from o_gateway.idempotency import IdempotencyKey, checked_key, resource_id
from o_gateway.identity_reads import identity_json, identity_row, identity_rows
from o_gateway.pagination import Listing
from o_gateway.routes.blocks import block_row
from o_gateway.routes.paths import route
from o_gateway.schemas import Body, Name, Object
from o_gateway.state import GW, Gateway, checked_id

router = APIRouter()
IdentityType = Literal["org", "user", "other"]


class IdentityProperty(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: Name
    value: str | int | float | bool | Object
    type: Literal["string", "number", "boolean", "json"]


Properties = Annotated[list[IdentityProperty], Field(max_length=MAX_LIST_ITEMS)]
Ids = Annotated[list[str], Field(max_length=MAX_LIST_ITEMS)]


class CreateIdentityBody(Body):
    identifier_key: Annotated[Name, Field(min_length=1)]
    name: Name
    identity_type: IdentityType
    project_id: Name | None = None
    agent_ids: Ids | None = None
    block_ids: Ids | None = None
    properties: Properties | None = None


class UpdateIdentityBody(Body):
    identifier_key: Annotated[Name, Field(min_length=1)] | None = None
    name: Name | None = None
    identity_type: IdentityType | None = None
    agent_ids: Ids | None = None
    block_ids: Ids | None = None
    properties: Properties | None = None


def _props(properties: list[IdentityProperty] | None) -> list[dict[str, Any]]:
    return [p.model_dump() for p in properties or []]


async def _checked(gw: Gateway, table: str, ids: list[str]) -> list[str]:
    """`ids` without repeats, each an agent (`table` "agents") or block that exists."""
    prefix: Literal["agent", "block"] = "agent" if table == "agents" else "block"
    wanted = list(dict.fromkeys(checked_id(i, prefix) for i in ids))
    found = set(
        await gw.pool.fetchval(f"SELECT array_agg(id) FROM {table} WHERE id = ANY($1)", wanted)
        or []
    )
    missing = [i for i in wanted if i not in found]
    if missing:
        raise HTTPException(404, f"{prefix.capitalize()} {missing[0]} not found")
    return wanted


async def _key_free(
    gw: Gateway, identifier_key: str, project_id: str | None, identity_id: str | None = None
) -> None:
    """Letta's unique (identifier_key, project_id): another identity holding both is a 409."""
    other = await gw.pool.fetchval(
        "SELECT id FROM identities WHERE identifier_key = $1"
        " AND project_id IS NOT DISTINCT FROM $2 AND id IS DISTINCT FROM $3",
        identifier_key,
        project_id,
        identity_id,
    )
    if other is not None:
        raise HTTPException(
            409,
            f"An identity with identifier_key='{identifier_key}', project_id='{project_id}'"
            " already exists.",
        )


async def _append(
    gw: Gateway, identity_id: str, event: Any, expected: int, id: str | None = None
) -> None:
    subject = subjects.identity_subject(identity_id)
    what = f"identity {identity_id}"
    await append_visible(gw, subject, identity_id, event, expected, what, IDENTITIES, id)


async def _change(gw: Gateway, row: Any, changes: dict[str, Any]) -> None:
    """Append what changes of the identity as read (nothing, when nothing does)."""
    changes = {
        k: v
        for k, v in changes.items()
        if v != (sorted(row[k]) if k in ("agent_ids", "block_ids") else row[k])
    }
    if changes:
        await _append(
            gw, row["id"], IdentityUpdated(identity_id=row["id"], changes=changes), row["last_seq"]
        )


async def _create(gw: Gateway, identity_id: str, body: CreateIdentityBody) -> None:
    await _key_free(gw, body.identifier_key, body.project_id)
    await _append(
        gw,
        identity_id,
        IdentityCreated(
            identity_id=identity_id,
            identifier_key=body.identifier_key,
            name=body.name,
            identity_type=body.identity_type,
            project_id=body.project_id,
            properties=_props(body.properties),
            agent_ids=await _checked(gw, "agents", body.agent_ids or []),
            block_ids=await _checked(gw, "blocks", body.block_ids or []),
        ),
        0,
    )


@route(router, "POST", "/v1/identities/")
async def create_identity(
    body: CreateIdentityBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    key = checked_key(idempotency_key)
    identity_id = resource_id("identity", key)
    if key is None or not await _made_before(gw, identity_id):
        try:
            await _create(gw, identity_id, body)
        except HTTPException as exc:
            # Two tries of the request at once: the other one made it.
            if key is None or exc.status_code != 409 or not await _made_before(gw, identity_id):
                raise
    return identity_json(await identity_row(gw.pool, identity_id))


async def _made_before(gw: Gateway, identity_id: str) -> bool:
    """Whether an earlier try of a keyed create made the identity (its id derives from the
    key). Asked of the log, not only of the projection: while the projection has not applied
    the first try's event, or once the identity was deleted since, the projection has no row,
    and a new create would meet the first one's event as a conflict (a 409 for a retry). A
    retry so answers what the projection shows once it has applied the log: the identity, or
    404 when it was deleted since (as a block's keyed create retried after its delete)."""
    if await gw.pool.fetchval("SELECT 1 FROM identities WHERE id = $1", identity_id):
        return True
    last = await gw.eventlog.last_seq(subjects.identity_subject(identity_id))
    if not last:
        return False
    await gw.visible(last, IDENTITIES)
    return True


@route(router, "PUT", "/v1/identities/")
async def upsert_identity(body: CreateIdentityBody, gw: GW) -> dict[str, Any]:
    """The identity with this key (and project) made to be as the body says; made if there
    is none (Letta's answers 404 then: docs/letta-compatibility.md)."""
    found = await gw.pool.fetchval(
        "SELECT id FROM identities WHERE identifier_key = $1"
        " AND project_id IS NOT DISTINCT FROM $2",
        body.identifier_key,
        body.project_id,
    )
    if found is None:
        found = resource_id("identity", None)
        await _create(gw, found, body)
        return identity_json(await identity_row(gw.pool, found))
    row = await identity_row(gw.pool, found)
    changes: dict[str, Any] = {"name": body.name, "identity_type": body.identity_type}
    # Lists given replace the identity's; lists left out stay as they are.
    if body.properties is not None:
        changes["properties"] = _props(body.properties)
    if body.agent_ids is not None:
        changes["agent_ids"] = sorted(await _checked(gw, "agents", body.agent_ids))
    if body.block_ids is not None:
        changes["block_ids"] = sorted(await _checked(gw, "blocks", body.block_ids))
    await _change(gw, row, changes)
    return identity_json(await identity_row(gw.pool, found))


@route(router, "GET", "/v1/identities/")
async def list_identities(
    gw: GW,
    name: str | None = None,
    project_id: str | None = None,
    identifier_key: str | None = None,
    identity_type: IdentityType | None = None,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
) -> list[dict[str, Any]]:
    q = _filtered(Listing("identities"), name, project_id, identifier_key, identity_type)
    rows = await q.page(gw.pool, "identity", before, after, order, limit)
    ordered = {r["id"]: r for r in await identity_rows(gw.pool, [r["id"] for r in rows])}
    return [identity_json(ordered[r["id"]]) for r in rows if r["id"] in ordered]


def _filtered(
    q: Listing,
    name: str | None = None,
    project_id: str | None = None,
    identifier_key: str | None = None,
    identity_type: str | None = None,
) -> Listing:
    if name:  # (Letta's: any part of the name, in any case)
        q.filter("name ILIKE {}", f"%{name}%")
    if project_id:
        q.filter("project_id = {}", project_id)
    if identifier_key:
        q.filter("identifier_key = {}", identifier_key)
    if identity_type:
        q.filter("identity_type = {}", identity_type)
    return q


@route(router, "GET", "/v1/identities/count")
async def count_identities(gw: GW) -> int:
    return await Listing("identities").count(gw.pool)


@route(router, "GET", "/v1/identities/{identity_id}")
async def retrieve_identity(identity_id: str, gw: GW) -> dict[str, Any]:
    return identity_json(await identity_row(gw.pool, checked_id(identity_id, "identity")))


@route(router, "PATCH", "/v1/identities/{identity_id}")
async def update_identity(identity_id: str, body: UpdateIdentityBody, gw: GW) -> dict[str, Any]:
    """As Letta's: properties merged by key, agents and blocks added to (never removed)."""
    row = await identity_row(gw.pool, checked_id(identity_id, "identity"))
    changes = body.model_dump(
        include={"identifier_key", "name", "identity_type"}, exclude_none=True
    )
    if body.identifier_key is not None and body.identifier_key != row["identifier_key"]:
        await _key_free(gw, body.identifier_key, row["project_id"], identity_id)
    if body.properties is not None:
        merged = {p["key"]: p for p in row["properties"] or []}
        merged |= {p["key"]: p for p in _props(body.properties)}
        changes["properties"] = list(merged.values())
    for field, table in (("agent_ids", "agents"), ("block_ids", "blocks")):
        added = getattr(body, field)
        if added:
            changes[field] = sorted({*row[field], *await _checked(gw, table, added)})
    await _change(gw, row, changes)
    return identity_json(await identity_row(gw.pool, identity_id))


@route(router, "PUT", "/v1/identities/{identity_id}/properties")
async def upsert_identity_properties(
    identity_id: str, body: Annotated[Properties, InBody()], gw: GW
) -> dict[str, Any]:
    """The identity's properties replaced by these (Letta's; [] clears them)."""
    row = await identity_row(gw.pool, checked_id(identity_id, "identity"))
    await _change(gw, row, {"properties": _props(body)})
    return identity_json(await identity_row(gw.pool, identity_id))


@route(router, "DELETE", "/v1/identities/{identity_id}")
async def delete_identity(identity_id: str, gw: GW) -> None:
    """The identity goes; its agents and blocks stay."""
    row = await identity_row(gw.pool, checked_id(identity_id, "identity"))
    await _append(gw, identity_id, IdentityDeleted(identity_id=identity_id), row["last_seq"])


@route(router, "GET", "/v1/identities/{identity_id}/agents")
async def list_agents_for_identity(
    identity_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
) -> list[dict[str, Any]]:
    await identity_row(gw.pool, checked_id(identity_id, "identity"))
    return await agents_where(
        gw,
        "id IN (SELECT agent_id FROM identity_agents WHERE identity_id = {})",
        identity_id,
        before,
        after,
        order,
        limit,
    )


@route(router, "GET", "/v1/identities/{identity_id}/blocks")
async def list_blocks_for_identity(
    identity_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
) -> list[dict[str, Any]]:
    await identity_row(gw.pool, checked_id(identity_id, "identity"))
    q = Listing("blocks")
    q.filter("id IN (SELECT block_id FROM identity_blocks WHERE identity_id = {})", identity_id)
    rows = await q.page(gw.pool, "block", before, after, order, limit)
    return [render.block(dict(r)) for r in rows]


async def _linked(gw: Gateway, identity_id: str, field: str, member: str, on: bool) -> None:
    """`member` (an agent's or block's id) added to the identity's `field`, or taken out."""
    row = await identity_row(gw.pool, checked_id(identity_id, "identity"))
    now = set(row[field])
    await _change(gw, row, {field: sorted(now | {member} if on else now - {member})})


@route(router, "PATCH", "/v1/agents/{agent_id}/identities/attach/{identity_id}")
async def attach_identity_to_agent(agent_id: str, identity_id: str, gw: GW) -> None:
    await gw.agent_row(checked_id(agent_id, "agent"))
    await _linked(gw, identity_id, "agent_ids", agent_id, True)


@route(router, "PATCH", "/v1/agents/{agent_id}/identities/detach/{identity_id}")
async def detach_identity_from_agent(agent_id: str, identity_id: str, gw: GW) -> None:
    await gw.agent_row(checked_id(agent_id, "agent"))
    await _linked(gw, identity_id, "agent_ids", agent_id, False)


@route(router, "PATCH", "/v1/blocks/{block_id}/identities/attach/{identity_id}")
async def attach_identity_to_block(block_id: str, identity_id: str, gw: GW) -> dict[str, Any]:
    await block_row(gw, checked_id(block_id, "block"))
    await _linked(gw, identity_id, "block_ids", block_id, True)
    return render.block(await block_row(gw, block_id))


@route(router, "PATCH", "/v1/blocks/{block_id}/identities/detach/{identity_id}")
async def detach_identity_from_block(block_id: str, identity_id: str, gw: GW) -> dict[str, Any]:
    await block_row(gw, checked_id(block_id, "block"))
    await _linked(gw, identity_id, "block_ids", block_id, False)
    return render.block(await block_row(gw, block_id))


async def set_agent_identities(gw: Gateway, agent_id: str, identity_ids: list[str]) -> None:
    """The agent's identities made exactly `identity_ids` (Letta's `identity_ids` of an
    agent's create and update): each identity it joins or leaves changes once."""
    wanted = set(identity_ids)
    having = set(
        await gw.pool.fetchval(
            "SELECT coalesce(array_agg(identity_id), '{}') FROM identity_agents"
            " WHERE agent_id = $1",
            agent_id,
        )
    )
    for identity_id in sorted(wanted ^ having):
        await _linked(gw, identity_id, "agent_ids", agent_id, identity_id in wanted)


async def link_agent_once(gw: Gateway, identity_id: str, agent_id: str, event_id: str) -> None:
    """The agent added to the identity by the event `event_id`, unless the identity's log
    holds it already: a request retried under its Idempotency-Key (an agent's create naming
    `identity_ids`) links once, and does not link again an agent detached since. Recorded
    even when the agent is in the identity already, for the same reason."""
    subject = subjects.identity_subject(identity_id)
    if any(r.envelope.id == event_id for r in await gw.eventlog.read_subject(subject)):
        return
    row = await identity_row(gw.pool, identity_id)
    linked = sorted(set(row["agent_ids"]) | {agent_id})
    event = IdentityUpdated(identity_id=identity_id, changes={"agent_ids": linked})
    await _append(gw, identity_id, event, row["last_seq"], event_id)


async def check_identities(gw: Gateway, identity_ids: list[str]) -> list[str]:
    """`identity_ids` of an agent's request, each one that exists (else 404), once each."""
    wanted = list(dict.fromkeys(checked_id(i, "identity") for i in identity_ids))
    found = {r["id"] for r in await identity_rows(gw.pool, wanted)}
    missing = [i for i in wanted if i not in found]
    if missing:
        raise HTTPException(404, f"Identity {missing[0]} not found")
    return wanted
