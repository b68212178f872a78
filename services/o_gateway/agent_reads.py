"""An agent as the API shows it (Letta's AgentState): its row, blocks, tools,
the approval it waits on and its last run, read from the projections and rendered."""

from __future__ import annotations

from typing import Any, Literal

from o_contracts.models import ChatMessage
from o_gateway import render
from o_gateway.folder_reads import agent_folder_rows, render_folder
from o_gateway.group_reads import managed_group, render_group
from o_gateway.identity_reads import identities_of_agent
from o_gateway.pagination import Listing
from o_gateway.state import Gateway
from o_gateway.tool_registry import user_tools


async def agent_state(gw: Gateway, agent_id: str) -> dict[str, Any]:
    row = await gw.agent_row(agent_id)
    return await render_agent(gw, row)


async def render_agent(gw: Gateway, row: dict[str, Any]) -> dict[str, Any]:
    tools = await user_tools(gw, list(row.get("tool_ids") or []))
    state = render.agent(row, await blocks_of(gw, row["id"]), tools)
    state["pending_approval"] = await pending_approval(gw, row["id"], row["agent_type"])
    state["message_ids"] = await message_ids(gw, row["id"])
    state["enable_sleeptime"] = row.get("enable_sleeptime")
    state["sources"] = [render_folder(f) for f in await agent_folder_rows(gw, row["id"])]
    # (An O extension: o_contracts/concurrency.py. '' or NULL: the route's, Letta's.)
    state["concurrency"] = row.get("concurrency") or None
    group = await managed_group(gw.pool, row["id"])
    rendered = await render_group(gw.pool, group) if group is not None else None
    state["multi_agent_group"] = state["managed_group"] = rendered
    state |= await last_run(gw, row["id"])
    state["identities"] = await identities_of_agent(gw.pool, row["id"])
    state["identity_ids"] = [i["id"] for i in state["identities"]]
    return state


async def agents_where(
    gw: Gateway,
    clause: str,
    value: str,
    before: str | None,
    after: str | None,
    order: Literal["asc", "desc"],
    limit: int,
) -> list[dict[str, Any]]:
    """A page of the agents `clause` keeps (a Listing filter naming `value` with `{}`), as
    Letta shows them: an archive's, an identity's or a block's agents."""
    q = Listing("agents")
    q.filter(clause, value)
    rows = await q.page(gw.pool, "agent", before, after, order, limit)
    return [await render_agent(gw, dict(r)) for r in rows]


async def message_ids(gw: Gateway, agent_id: str) -> list[str]:
    """The default conversation's in-context messages, system prompt first (Letta's message_ids)."""
    ids: list[str] = await gw.pool.fetchval(
        "SELECT coalesce(array_agg(id ORDER BY seq), '{}') FROM messages"
        " WHERE agent_id = $1 AND in_context AND conversation_id IS NULL",
        agent_id,
    )
    return ids


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
        " JOIN messages m ON m.id = p.message_id WHERE p.agent_id = $1"
        " AND p.conversation_id IS NULL ORDER BY p.seq LIMIT 1",
        agent_id,
    )
    if row is None:
        return None
    message = ChatMessage.model_validate(row["body"])
    rendered = render.letta_messages(
        message, row["created_at"], row["run_id"], row["step_id"], agent_type
    )
    return next((m for m in rendered if m["message_type"] == "approval_request_message"), None)


async def blocks_of(gw: Gateway, agent_id: str) -> list[dict[str, Any]]:
    rows = await gw.pool.fetch(
        "SELECT b.* FROM agent_blocks ab JOIN blocks b ON b.id = ab.block_id"
        " WHERE ab.agent_id = $1 ORDER BY ab.position, b.id",
        agent_id,
    )
    return [dict(r) for r in rows]
