"""The tool registry as the gateway sees it: built-in tools by name, user tools by id.

Built-in tools are not in the registry: they have stable ids derived from their
names and live in `agents.tools`; user tools are `tools` rows attached through
`agents.tool_ids`.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from o_contracts.base_tools import SCHEMAS
from o_gateway.mcp_tools import attachable_rows, render_mcp_tool
from o_gateway.state import Gateway
from o_gateway.tools_catalog import tool_state

BUILTIN_IDS = {tool_state(name)["id"]: name for name in SCHEMAS}


def render_user_tool(row: dict[str, Any]) -> dict[str, Any]:
    if row.get("tool_type") == "external_mcp":
        return render_mcp_tool(row, row["server_name"])
    return {
        "id": row["id"],
        "name": row["name"],
        "tool_type": "custom",
        "description": row["description"],
        "source_type": row["source_type"],
        "tags": row["tags"] or [],
        "source_code": row["source_code"],
        "json_schema": row["json_schema"],
        "args_json_schema": None,
        "return_char_limit": row["return_char_limit"],
        # Letta's null for none.
        "pip_requirements": row.get("pip_requirements") or None,
        "npm_requirements": None,
        "default_requires_approval": row["default_requires_approval"],
        "enable_parallel_execution": False,
        "created_by_id": None,
        "last_updated_by_id": None,
        "project_id": None,
        "metadata_": row["metadata"] or {},
        # O's extension: a sandbox that dies mid-call retries an idempotent tool once.
        "idempotent": row["idempotent"],
    }


async def user_tool_row(gw: Gateway, tool_id: str) -> dict[str, Any]:
    row = await gw.pool.fetchrow("SELECT * FROM tools WHERE id = $1", tool_id)
    if row is None:
        raise HTTPException(404, f"Tool {tool_id} not found")
    return dict(row)


async def user_tool_by_name(gw: Gateway, name: str) -> dict[str, Any] | None:
    row = await gw.pool.fetchrow(
        "SELECT * FROM tools WHERE name = $1 ORDER BY created_at, id LIMIT 1", name
    )
    return dict(row) if row else None


async def user_tools(gw: Gateway, tool_ids: list[str]) -> list[dict[str, Any]]:
    """The rows of these tools (users' and MCP servers'), in the given order; ids of
    deleted tools are skipped."""
    if not tool_ids:
        return []
    rows = {
        r["id"]: dict(r)
        for r in await gw.pool.fetch("SELECT * FROM tools WHERE id = ANY($1)", tool_ids)
    }
    rows |= await attachable_rows(gw, [i for i in tool_ids if i not in rows])
    return [rows[i] for i in tool_ids if i in rows]


async def attachable_row(gw: Gateway, tool_id: str) -> dict[str, Any]:
    """A user's tool or an MCP server's, to attach to an agent."""
    found = await user_tools(gw, [tool_id])
    if not found:
        raise HTTPException(404, f"Tool {tool_id} not found")
    return found[0]
