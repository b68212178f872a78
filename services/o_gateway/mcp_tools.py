"""The tools MCP servers offer, as O records and shows them (Letta's `external_mcp` tools)."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from o_contracts.events.mcp_servers import McpToolOffered
from o_contracts.ids import derived_id
from o_gateway.mcp_registry import McpServer
from o_gateway.state import Gateway
from o_runtime.mcp_client import OfferedTool

# Letta tags an MCP tool `mcp:<server name>` and keeps its origin under metadata_["mcp"].
TAG_PREFIX = "mcp"


def offered(server_id: str, tool: OfferedTool) -> McpToolOffered:
    """One listed tool as recorded: its id derives from (server, name), so it survives syncs."""
    parameters = {k: v for k, v in tool.input_schema.items() if k != "title"}
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    # Zero-argument tools often leave out `required`; Letta writes it always.
    parameters.setdefault("required", [])
    schema: dict[str, Any] = {"name": tool.name, "parameters": parameters}
    if tool.description:
        schema["description"] = tool.description
    return McpToolOffered(
        tool_id=derived_id("tool", "mcp", server_id, tool.name),
        name=tool.name,
        description=tool.description,
        json_schema=schema,
    )


def render_mcp_tool(row: dict[str, Any], server_name: str) -> dict[str, Any]:
    return {
        "id": row["id"],
        "name": row["name"],
        "tool_type": "external_mcp",
        "description": row["description"],
        "source_type": "python",
        "tags": [f"{TAG_PREFIX}:{server_name}"],
        "source_code": None,
        "json_schema": row["json_schema"],
        "args_json_schema": None,
        "return_char_limit": 50000,
        "pip_requirements": None,
        "npm_requirements": None,
        "default_requires_approval": False,
        "enable_parallel_execution": False,
        "created_by_id": None,
        "last_updated_by_id": None,
        "project_id": None,
        "metadata_": {TAG_PREFIX: {"server_name": server_name, "server_id": row["mcp_server_id"]}},
    }


async def tools_of(gw: Gateway, server: McpServer) -> list[dict[str, Any]]:
    rows = await gw.pool.fetch(
        "SELECT * FROM mcp_tools WHERE mcp_server_id = $1 ORDER BY position", server.id
    )
    return [dict(r) for r in rows]


async def tool_of(gw: Gateway, server: McpServer, tool_id: str) -> dict[str, Any]:
    row = await gw.pool.fetchrow(
        "SELECT * FROM mcp_tools WHERE mcp_server_id = $1 AND id = $2", server.id, tool_id
    )
    if row is None:
        raise HTTPException(404, f"Tool {tool_id} not found on MCP server {server.id}")
    return dict(row)


_AS_TOOL_ROWS = (
    "SELECT t.*, s.server_name, 'external_mcp' AS tool_type,"
    " false AS default_requires_approval FROM mcp_tools t"
    " JOIN mcp_servers s ON s.id = t.mcp_server_id"
)


async def attachable_rows(gw: Gateway, tool_ids: list[str]) -> dict[str, dict[str, Any]]:
    """MCP tools among `tool_ids`, by id, as rows agents attach (tool_registry.user_tools)."""
    rows = await gw.pool.fetch(f"{_AS_TOOL_ROWS} WHERE t.id = ANY($1)", tool_ids)
    return {r["id"]: dict(r) for r in rows}


async def all_mcp_rows(gw: Gateway) -> list[dict[str, Any]]:
    """Every server's tools, oldest server first, each in the order its server listed them."""
    rows = await gw.pool.fetch(f"{_AS_TOOL_ROWS} ORDER BY s.created_at, s.id, t.position")
    return [dict(r) for r in rows]
