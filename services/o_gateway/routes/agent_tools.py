"""An agent's tools: list, attach, detach (built-in tools by their ids, user tools by theirs)."""

from __future__ import annotations

from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from o_contracts.events import AgentUpdated, ToolAttached, ToolDetached
from o_gateway import render
from o_gateway.routes.agents import agent_state, change_agent, check_unique_names
from o_gateway.routes.paths import route
from o_gateway.state import GW, checked_id
from o_gateway.tool_registry import BUILTIN_IDS, render_user_tool, user_tool_row, user_tools
from o_runtime.eventlog import AppendRejected

router = APIRouter()


@route(router, "GET", "/v1/agents/{agent_id}/tools")
async def list_agent_tools(
    agent_id: str,
    gw: GW,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[dict[str, Any]]:
    row = await gw.agent_row(checked_id(agent_id, "agent"))
    tools = [render.tool(n) for n in row["tools"]] + [
        render_user_tool(t) for t in await user_tools(gw, list(row["tool_ids"]))
    ]
    if after:
        # The official client pages with after=<last id> until a page is empty.
        ids = [t["id"] for t in tools]
        tools = tools[ids.index(after) + 1 :] if after in ids else []
    return tools[:limit]


@route(router, "PATCH", "/v1/agents/{agent_id}/tools/attach/{tool_id}")
async def attach_tool(agent_id: str, tool_id: str, gw: GW) -> dict[str, Any]:
    checked_id(agent_id, "agent")
    checked_id(tool_id, "tool")
    builtin = BUILTIN_IDS.get(tool_id)
    tool = None if builtin else await user_tool_row(gw, tool_id)

    async def event_for(row: dict[str, Any], _conn: asyncpg.Connection) -> Any:
        if builtin is not None:
            if builtin in row["tools"]:
                return None
            return AgentUpdated(agent_id=agent_id, changes={"tools": [*row["tools"], builtin]})
        assert tool is not None
        if tool_id in row["tool_ids"]:
            return None
        names = [t["name"] for t in await user_tools(gw, list(row["tool_ids"]))]
        try:
            check_unique_names(list(row["tools"]), [*names, tool["name"]])
        except HTTPException as exc:
            raise AppendRejected(str(exc.detail), exc.status_code) from exc
        return ToolAttached(
            agent_id=agent_id,
            tool_id=tool_id,
            requires_approval=bool(tool["default_requires_approval"]),
            tool_name=tool["name"],
        )

    seq = await change_agent(gw, agent_id, event_for)
    await gw.visible(seq, "agents")
    return await agent_state(gw, agent_id)


@route(router, "PATCH", "/v1/agents/{agent_id}/tools/detach/{tool_id}")
async def detach_tool(agent_id: str, tool_id: str, gw: GW) -> dict[str, Any]:
    checked_id(agent_id, "agent")
    checked_id(tool_id, "tool")
    builtin = BUILTIN_IDS.get(tool_id)

    async def event_for(row: dict[str, Any], _conn: asyncpg.Connection) -> Any:
        if builtin is not None:
            if builtin not in row["tools"]:
                return None
            kept = [n for n in row["tools"] if n != builtin]
            return AgentUpdated(agent_id=agent_id, changes={"tools": kept})
        if tool_id not in row["tool_ids"]:
            return None
        return ToolDetached(agent_id=agent_id, tool_id=tool_id)

    seq = await change_agent(gw, agent_id, event_for)
    await gw.visible(seq, "agents")
    return await agent_state(gw, agent_id)


class ApprovalBody(BaseModel):
    requires_approval: bool


@route(router, "PATCH", "/v1/agents/{agent_id}/tools/approval/{tool_name}")
async def set_tool_approval(
    agent_id: str, tool_name: str, body: ApprovalBody, gw: GW
) -> dict[str, Any]:
    """Whether calls of `tool_name` wait for a person: a requires_approval rule on the agent."""
    checked_id(agent_id, "agent")

    async def event_for(row: dict[str, Any], _conn: asyncpg.Connection) -> AgentUpdated | None:
        names = set(row["tools"]) | {t["name"] for t in await user_tools(gw, list(row["tool_ids"]))}
        if tool_name not in names:
            raise AppendRejected(f"agent {agent_id} has no tool named '{tool_name}'", 404)
        rules = [
            r
            for r in row["tool_rules"]
            if not (r.get("type") == "requires_approval" and r.get("tool_name") == tool_name)
        ]
        if body.requires_approval:
            rules.append({"type": "requires_approval", "tool_name": tool_name})
        if rules == row["tool_rules"]:
            return None
        return AgentUpdated(agent_id=agent_id, changes={"tool_rules": rules})

    seq = await change_agent(gw, agent_id, event_for)
    await gw.visible(seq, "agents")
    return await agent_state(gw, agent_id)
