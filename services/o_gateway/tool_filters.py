"""Every tool an agent can have, and Letta's filters over them (list, count, search).

O's tools are few (the built-in ones, users', MCP servers'), so they are read
whole and filtered here rather than in SQL: one place for the filters the list,
the count and the search share, as Letta's tool manager shares them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from o_contracts.base_tools import SCHEMAS
from o_gateway.mcp_tools import all_mcp_rows
from o_gateway.state import Gateway
from o_gateway.tool_registry import render_user_tool
from o_gateway.tools_catalog import tool_state

# Letta's ToolType values (letta/schemas/enums.py).
TOOL_TYPES = (
    "custom",
    "letta_core",
    "letta_memory_core",
    "letta_multi_agent_core",
    "letta_sleeptime_core",
    "letta_voice_sleeptime_core",
    "letta_builtin",
    "letta_files_core",
    "external_langchain",
    "external_composio",
    "external_mcp",
)


async def all_tools(gw: Gateway) -> list[dict[str, Any]]:
    """Oldest first: built-in tools, users' tools in creation order, MCP servers' tools."""
    rows = await gw.pool.fetch("SELECT * FROM tools ORDER BY created_at, id")
    tools = [tool_state(n) for n in SCHEMAS] + [render_user_tool(dict(r)) for r in rows]
    return tools + [render_user_tool(r) for r in await all_mcp_rows(gw)]


def split(values: Iterable[str] | None) -> list[str]:
    """Letta takes repeated parameters or comma-separated values."""
    return [v.strip() for item in values or () for v in item.split(",") if v.strip()]


def tool_types(values: Iterable[str] | None) -> list[str]:
    found = split(values)
    for t in found:
        if t not in TOOL_TYPES:
            raise HTTPException(
                400, f"Invalid tool_type '{t}'. Must be one of: {', '.join(TOOL_TYPES)}"
            )
    return found


@dataclass(frozen=True)
class ToolFilter:
    names: frozenset[str] = frozenset()
    tool_ids: frozenset[str] = frozenset()
    search: str | None = None
    tool_types: frozenset[str] = frozenset()
    exclude_tool_types: frozenset[str] = frozenset()
    only_letta: bool = False
    exclude_letta: bool = False
    tags: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls,
        name: str | None = None,
        names: list[str] | None = None,
        tool_ids: list[str] | None = None,
        search: str | None = None,
        types: list[str] | None = None,
        exclude_types: list[str] | None = None,
        only_letta: bool | None = False,
        exclude_letta: bool | None = False,
        tags: list[str] | None = None,
    ) -> ToolFilter:
        return cls(
            names=frozenset([*(names or []), *([name] if name is not None else [])]),
            tool_ids=frozenset(split(tool_ids)),
            search=search or None,
            tool_types=frozenset(tool_types(types)),
            exclude_tool_types=frozenset(tool_types(exclude_types)),
            only_letta=bool(only_letta),
            exclude_letta=bool(exclude_letta),
            tags=frozenset(tags or []),
        )

    def keeps(self, tool: dict[str, Any]) -> bool:
        kind = str(tool.get("tool_type") or "custom")
        return (
            (not self.names or tool["name"] in self.names)
            and (not self.tool_ids or tool["id"] in self.tool_ids)
            and (not self.search or self.search.lower() in tool["name"].lower())
            and (not self.tool_types or kind in self.tool_types)
            and kind not in self.exclude_tool_types
            and (not self.only_letta or kind.startswith("letta_"))
            and not (self.exclude_letta and kind.startswith("letta_"))
            and (not self.tags or bool(self.tags & set(tool.get("tags") or [])))
        )

    def apply(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [t for t in tools if self.keeps(t)]
