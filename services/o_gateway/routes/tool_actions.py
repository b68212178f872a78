"""Letta's tool routes beyond the registry (letta/server/rest_api/routers/v1/tools.py):
count, search, add-base-tools, run from source, generate a schema; and
`POST /v1/agents/{agent_id}/tools/{tool_name}/run` (an agent's tool, by name).

Registered before routes/tools.py, so `/v1/tools/count` is not read as a tool id.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import Field

from o_contracts.base_tools import SCHEMAS
from o_contracts.ids import derived_id
from o_contracts.limits import MAX_LIST_ITEMS
from o_gateway.idempotency import IdempotencyKey, checked_key, resource_id
from o_gateway.routes.paths import route
from o_gateway.schemas import Body, Name, Object, PipRequirements, Tags
from o_gateway.state import GW, checked_id
from o_gateway.tool_filters import ToolFilter, all_tools
from o_gateway.tool_runs import encrypted, function_name, run_agent_tool, run_in_sandbox
from o_gateway.tool_schema import ToolSourceError, derive_schema
from o_gateway.tool_search import ranked
from o_gateway.tools_catalog import tool_state

router = APIRouter()

SOURCE_CHARS = 200_000


@route(router, "GET", "/v1/tools/count")
async def count_tools(
    gw: GW,
    name: str | None = None,
    names: Annotated[list[str] | None, Query()] = None,
    tool_ids: Annotated[list[str] | None, Query()] = None,
    search: str | None = None,
    tool_types: Annotated[list[str] | None, Query()] = None,
    exclude_tool_types: Annotated[list[str] | None, Query()] = None,
    return_only_letta_tools: bool | None = False,
    exclude_letta_tools: bool | None = False,
) -> int:
    wanted = ToolFilter.of(
        name,
        names,
        tool_ids,
        search,
        tool_types,
        exclude_tool_types,
        return_only_letta_tools,
        exclude_letta_tools,
    )
    return len(wanted.apply(await all_tools(gw)))


class SearchBody(Body):
    query: Annotated[str, Field(max_length=4096)] | None = None
    search_mode: Literal["vector", "fts", "hybrid"] = "hybrid"
    tool_types: Annotated[list[Name], Field(max_length=32)] | None = None
    tags: Tags | None = None
    limit: int = Field(default=50, ge=1, le=100)


@route(router, "POST", "/v1/tools/search")
async def search_tools(body: SearchBody, gw: GW) -> list[dict[str, Any]]:
    """Tools ranked by the query's words, in every mode (o_gateway/tool_search.py)."""
    wanted = ToolFilter.of(types=body.tool_types, tags=body.tags)
    candidates = wanted.apply(await all_tools(gw))
    found = ranked(candidates, body.query) if body.query else [(t, 0.0) for t in candidates]
    return [
        {
            "tool": tool,
            "embedded_text": None,
            "fts_rank": i + 1 if body.query else None,
            "vector_rank": None,
            "combined_score": score,
        }
        for i, (tool, score) in enumerate(found[: body.limit])
    ]


@route(router, "POST", "/v1/tools/add-base-tools")
async def add_base_tools(gw: GW) -> list[dict[str, Any]]:
    """O's built-in tools. They are part of O, never rows to upsert: listed as they are."""
    return [tool_state(n) for n in SCHEMAS]


class RunFromSourceBody(Body):
    source_code: str = Field(min_length=1, max_length=SOURCE_CHARS)
    args: Object
    env_vars: dict[Name, Annotated[str, Field(max_length=65536)]] | None = None
    name: Name | None = None
    source_type: Name | None = None
    args_json_schema: Object | None = None
    json_schema: Object | None = None
    pip_requirements: PipRequirements | None = None
    npm_requirements: list[Object] | None = Field(default=None, max_length=MAX_LIST_ITEMS)


@route(router, "POST", "/v1/tools/run")
async def run_tool_from_source(
    body: RunFromSourceBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    """Run source in the sandbox without registering it (Letta's ToolReturnMessage)."""
    if body.source_type not in (None, "python"):
        raise HTTPException(400, f"O runs Python tools only, not {body.source_type}")
    if body.npm_requirements:
        raise HTTPException(400, "npm_requirements are not supported: O runs Python tools only")
    given = body.name or (body.json_schema or {}).get("name")
    name = function_name(body.source_code, given if isinstance(given, str) else None)
    execution_id = resource_id("cmd", checked_key(idempotency_key), "tools-run")
    outcome = await run_in_sandbox(
        gw,
        execution_id,
        source_code=body.source_code,
        name=name,
        args=body.args,
        encrypted_secrets=encrypted(body.env_vars),
        requirements=body.pip_requirements or [],
        # The run's own tool id, as Letta's unsaved tool has one (LETTA_TOOL_ID); the same
        # for a retry of the same request.
        tool_id=derived_id("tool", execution_id),
    )
    status = "success" if outcome.ok else "error"
    tool_return = {
        "tool_return": outcome.text,
        "status": status,
        "tool_call_id": execution_id,
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
    }
    return {
        "id": derived_id("message", execution_id),
        "date": _now(),
        "name": name,
        "message_type": "tool_return_message",
        "otid": None,
        "sender_id": None,
        "step_id": None,
        "is_err": None,
        "seq_id": None,
        "run_id": None,
        **tool_return,
        "tool_returns": [{"type": "tool", **tool_return}],
    }


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class CodeBody(Body):
    code: str = Field(min_length=1, max_length=SOURCE_CHARS)
    source_type: Literal["python", "typescript"] | None = None


@route(router, "POST", "/v1/tools/generate-schema")
async def generate_json_schema(body: CodeBody) -> dict[str, Any]:
    """The JSON schema O would give a tool with this source (the last function's)."""
    if body.source_type == "typescript":
        raise HTTPException(400, "O runs Python tools only, not typescript")
    try:
        return derive_schema(body.code)
    except ToolSourceError as exc:
        raise HTTPException(400, str(exc)) from exc


class ToolRunBody(Body):
    args: Object = Field(default_factory=dict)


@route(router, "POST", "/v1/agents/{agent_id}/tools/{tool_name}/run")
async def run_tool_for_agent(
    agent_id: str,
    tool_name: str,
    gw: GW,
    body: ToolRunBody | None = None,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """An agent's tool, by name, with the agent's secrets (Letta's ToolExecutionResult)."""
    checked_id(agent_id, "agent")
    key = checked_key(idempotency_key)
    execution_id = resource_id("cmd", key, agent_id, tool_name, "run")
    args = body.args if body is not None else {}
    return await run_agent_tool(gw, agent_id, tool_name, args, execution_id)
