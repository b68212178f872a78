"""Tools: `/v1/tools/` (create from source, upsert, list, get, update, delete)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from o_contracts import subjects
from o_contracts.base_tools import SCHEMAS
from o_contracts.events import ToolCreated, ToolDeleted, ToolUpdated
from o_contracts.ids import new_id
from o_contracts.pip_requirements import PipRequirement
from o_contracts.projection_names import TOOLS
from o_gateway.commands import append_visible
from o_gateway.package_hints import prepare_packages
from o_gateway.pagination import page_of
from o_gateway.routes.paths import route
from o_gateway.schemas import CreateToolBody, UpdateToolBody
from o_gateway.state import GW, Gateway, checked_id
from o_gateway.tool_filters import ToolFilter, all_tools
from o_gateway.tool_registry import (
    BUILTIN_IDS,
    attachable_row,
    render_user_tool,
    user_tool_by_name,
    user_tool_row,
)
from o_gateway.tool_schema import ToolSourceError, derive_schema
from o_gateway.tools_catalog import tool_state

router = APIRouter()


def schema_for(source_code: str, json_schema: dict[str, Any] | None) -> dict[str, Any]:
    """The body's json_schema if given (checked), else one derived from the source."""
    if json_schema is not None:
        name = json_schema.get("name")
        params = json_schema.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(name, str) or not name or not isinstance(params, dict):
            raise HTTPException(400, "json_schema needs a 'name' and a 'parameters' object")
        try:
            derive_schema(source_code, name)
        except ToolSourceError as exc:
            raise HTTPException(400, str(exc)) from exc
        return {**json_schema, "parameters": params}
    try:
        return derive_schema(source_code)
    except ToolSourceError as exc:
        raise HTTPException(400, str(exc)) from exc


def check_name_free(name: str) -> None:
    if name in SCHEMAS:
        raise HTTPException(409, f"'{name}' is the name of a built-in tool")


async def append_tool_event(gw: Gateway, tool_id: str, event: Any, expected: int | None) -> int:
    subject = subjects.tool_subject(tool_id)
    return await append_visible(gw, subject, tool_id, event, expected, f"tool {tool_id}", TOOLS)


async def create(gw: Gateway, body: CreateToolBody) -> dict[str, Any]:
    schema = schema_for(body.source_code, body.json_schema)
    check_name_free(schema["name"])
    if await user_tool_by_name(gw, schema["name"]) is not None:
        raise HTTPException(409, f"a tool named '{schema['name']}' already exists")
    tool_id = new_id("tool")
    event = ToolCreated(
        tool_id=tool_id,
        name=schema["name"],
        description=body.description or schema.get("description"),
        source_type=body.source_type,
        source_code=body.source_code,
        json_schema=schema,
        tags=body.tags or [],
        return_char_limit=body.return_char_limit,
        default_requires_approval=bool(body.default_requires_approval),
        idempotent=body.idempotent,
        metadata=body.metadata_ or {},
        pip_requirements=body.pip_requirements or [],
    )
    await append_tool_event(gw, tool_id, event, expected=0)
    if body.pip_requirements:
        await prepare_packages(gw, body.pip_requirements)
    return render_user_tool(await user_tool_row(gw, tool_id))


async def update(gw: Gateway, tool_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    row = await user_tool_row(gw, tool_id)
    changes: dict[str, Any] = {}
    for key in ("description", "tags", "return_char_limit", "default_requires_approval"):
        if fields.get(key) is not None:
            changes[key] = fields[key]
    if fields.get("idempotent") is not None:
        changes["idempotent"] = fields["idempotent"]
    if fields.get("metadata_") is not None:
        changes["metadata"] = fields["metadata_"]
    if fields.get("pip_requirements") is not None:
        changes["pip_requirements"] = [
            PipRequirement.model_validate(r).model_dump() for r in fields["pip_requirements"]
        ]
    if fields.get("source_code") is not None or fields.get("json_schema") is not None:
        source = fields.get("source_code") or row["source_code"]
        schema = schema_for(source, fields.get("json_schema"))
        if schema["name"] != row["name"]:
            check_name_free(schema["name"])
            other = await user_tool_by_name(gw, schema["name"])
            if other is not None and other["id"] != tool_id:
                raise HTTPException(409, f"a tool named '{schema['name']}' already exists")
            changes["name"] = schema["name"]
        changes["source_code"] = source
        changes["json_schema"] = schema
        if "description" not in changes:
            changes["description"] = schema.get("description")
    if changes:
        await append_tool_event(
            gw, tool_id, ToolUpdated(tool_id=tool_id, changes=changes), expected=row["last_seq"]
        )
    if changes.get("pip_requirements"):
        wanted = [PipRequirement.model_validate(r) for r in changes["pip_requirements"]]
        await prepare_packages(gw, wanted)
    return render_user_tool(await user_tool_row(gw, tool_id))


@route(router, "POST", "/v1/tools/")
async def create_tool(body: CreateToolBody, gw: GW) -> dict[str, Any]:
    return await create(gw, body)


@route(router, "PUT", "/v1/tools/")
async def upsert_tool(body: CreateToolBody, gw: GW) -> dict[str, Any]:
    schema = schema_for(body.source_code, body.json_schema)
    existing = await user_tool_by_name(gw, schema["name"])
    if existing is None:
        return await create(gw, body)
    return await update(gw, existing["id"], body.model_dump(exclude_unset=True))


@route(router, "GET", "/v1/tools/")
async def list_tools(
    gw: GW,
    name: str | None = None,
    names: Annotated[list[str] | None, Query()] = None,
    tool_ids: Annotated[list[str] | None, Query()] = None,
    search: str | None = None,
    tool_types: Annotated[list[str] | None, Query()] = None,
    exclude_tool_types: Annotated[list[str] | None, Query()] = None,
    return_only_letta_tools: bool | None = False,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
) -> list[dict[str, Any]]:
    # Built-in, users' and MCP servers' tools (as Letta's registry holds them), filtered
    # as Letta filters them (o_gateway/tool_filters.py); few enough to page in memory.
    wanted = ToolFilter.of(
        name, names, tool_ids, search, tool_types, exclude_tool_types, return_only_letta_tools
    )
    everything = wanted.apply(await all_tools(gw))
    return page_of(everything, lambda t: str(t["id"]), before, after, order, limit)


@route(router, "GET", "/v1/tools/{tool_id}")
async def get_tool(tool_id: str, gw: GW) -> dict[str, Any]:
    checked_id(tool_id, "tool")
    if tool_id in BUILTIN_IDS:
        return tool_state(BUILTIN_IDS[tool_id])
    # An MCP server's tool too, as Letta finds it by id.
    return render_user_tool(await attachable_row(gw, tool_id))


@route(router, "PATCH", "/v1/tools/{tool_id}")
async def update_tool(tool_id: str, body: UpdateToolBody, gw: GW) -> dict[str, Any]:
    checked_id(tool_id, "tool")
    if tool_id in BUILTIN_IDS:
        raise HTTPException(400, "built-in tools cannot be changed")
    return await update(gw, tool_id, body.model_dump(exclude_unset=True))


@route(router, "DELETE", "/v1/tools/{tool_id}")
async def delete_tool(tool_id: str, gw: GW) -> dict[str, Any]:
    checked_id(tool_id, "tool")
    if tool_id in BUILTIN_IDS:
        raise HTTPException(400, "built-in tools cannot be deleted")
    row = await user_tool_row(gw, tool_id)
    await append_tool_event(gw, tool_id, ToolDeleted(tool_id=tool_id), row["last_seq"])
    return {"message": f"Tool id={tool_id} successfully deleted"}
