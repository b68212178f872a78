"""An agent's tools: list, attach, detach (built-in tools by their ids, user tools by theirs)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel

from o_contracts.projection_names import AGENTS
from o_gateway import render
from o_gateway.agent_reads import agent_state
from o_gateway.decisions import (
    AttachTool,
    BuiltinTool,
    DetachTool,
    SetToolApproval,
    UserTool,
    change_agent,
)
from o_gateway.pagination import page_of
from o_gateway.routes.paths import route
from o_gateway.state import GW, checked_id
from o_gateway.tool_registry import BUILTIN_IDS, attachable_row, render_user_tool, user_tools

router = APIRouter()


@route(router, "GET", "/v1/agents/{agent_id}/tools")
async def list_agent_tools(
    agent_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
) -> list[dict[str, Any]]:
    row = await gw.agent_row(checked_id(agent_id, "agent"))
    # Oldest first: built-in tools (which exist before any agent), then user tools in
    # the order they were attached.
    tools = [render.tool(n) for n in row["tools"]] + [
        render_user_tool(t) for t in await user_tools(gw, list(row["tool_ids"]))
    ]
    return page_of(tools, lambda t: str(t["id"]), before, after, order, limit)


@route(router, "PATCH", "/v1/agents/{agent_id}/tools/attach/{tool_id}")
async def attach_tool(agent_id: str, tool_id: str, gw: GW) -> dict[str, Any]:
    checked_id(agent_id, "agent")
    checked_id(tool_id, "tool")
    builtin = BUILTIN_IDS.get(tool_id)
    tool = (
        BuiltinTool(builtin)
        if builtin is not None
        else UserTool.from_row(await attachable_row(gw, tool_id))
    )
    seq = await change_agent(gw, AttachTool(agent_id, tool))
    await gw.visible(seq, AGENTS)
    return await agent_state(gw, agent_id)


@route(router, "PATCH", "/v1/agents/{agent_id}/tools/detach/{tool_id}")
async def detach_tool(agent_id: str, tool_id: str, gw: GW) -> dict[str, Any]:
    checked_id(agent_id, "agent")
    checked_id(tool_id, "tool")
    builtin = BUILTIN_IDS.get(tool_id)
    command = DetachTool(agent_id, tool_id, BuiltinTool(builtin) if builtin is not None else None)
    seq = await change_agent(gw, command)
    await gw.visible(seq, AGENTS)
    return await agent_state(gw, agent_id)


class ApprovalBody(BaseModel):
    requires_approval: bool


@route(router, "PATCH", "/v1/agents/{agent_id}/tools/approval/{tool_name}")
async def set_tool_approval(
    agent_id: str, tool_name: str, body: ApprovalBody, gw: GW
) -> dict[str, Any]:
    """Whether calls of `tool_name` wait for a person: a requires_approval rule on the agent."""
    command = SetToolApproval(checked_id(agent_id, "agent"), tool_name, body.requires_approval)
    seq = await change_agent(gw, command)
    await gw.visible(seq, AGENTS)
    return await agent_state(gw, agent_id)
