"""The built-in tools as Letta Tool objects (user tools: tool_registry.py)."""

from __future__ import annotations

from typing import Any

from o_contracts.base_tools import CODE_TOOLS, FILE_TOOLS, MULTI_AGENT_TOOLS, SCHEMAS, WEB_TOOLS
from o_contracts.ids import derived_id


def tool_type(name: str) -> str:
    """Letta's ToolType of a built-in tool."""
    if name in MULTI_AGENT_TOOLS:
        return "letta_multi_agent_core"
    if name in FILE_TOOLS:
        return "letta_files_core"
    if name in WEB_TOOLS or name in CODE_TOOLS:
        return "letta_builtin"
    return "letta_core" if name in SCHEMAS else "custom"


def tool_state(name: str) -> dict[str, Any]:
    schema = SCHEMAS.get(name, {"name": name, "description": "", "parameters": {}})
    return {
        "id": derived_id("tool", "builtin", name),
        "name": name,
        "tool_type": tool_type(name),
        "description": schema.get("description"),
        "source_type": "python",
        "tags": [],
        "source_code": None,
        "json_schema": schema,
        "args_json_schema": None,
        "return_char_limit": 50000,
        "pip_requirements": None,
        "npm_requirements": None,
        "default_requires_approval": None,
        "enable_parallel_execution": False,
        "metadata_": {},
    }
