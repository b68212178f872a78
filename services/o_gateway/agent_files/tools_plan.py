"""What becomes of each tool of an agent file in O.

- A tool whose name is one of O's built-in tools is that tool (Letta's rule:
  its core tools are never overwritten from outside).
- A user's Python tool is created, or, when O has a tool of that name already,
  that tool is updated from the file (`override_existing_tools`, Letta's
  default) or used as it is. Its source must parse and define the function the
  schema names, or the whole file is refused.
- An MCP server's tool is the tool of that name its server offers: a server the
  import registers from the file (mcp_plan.py), else a registered MCP server of the
  same name.
- Letta built-ins O does not have (web_search, run_code, the file tools ...) and
  tools in other languages are left out, and the import says so.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import HTTPException

from o_contracts.base_tools import SCHEMAS
from o_contracts.events import ToolCreated, ToolUpdated
from o_contracts.ids import derived_id
from o_gateway.agent_files.mcp_plan import server_name_of
from o_gateway.agent_files.schema import FileTool
from o_gateway.tool_schema import ToolSourceError, derive_schema

PYTHON_SOURCES = (None, "python", "json")


@dataclass(frozen=True)
class ToolChoice:
    """One file tool in O: a built-in (by name), a user or MCP tool (by id), or left out."""

    kind: Literal["builtin", "user", "left_out"]
    name: str
    tool_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class ToolWrite:
    tool_id: str
    event: ToolCreated | ToolUpdated
    # The tool subject's position the write expects: 0 for a new tool.
    expected: int
    # An existing tool's override: its event's id (derived from the import), which a
    # retry of the import finds on the tool's subject and does not write again.
    once: str | None = None


@dataclass
class ToolsPlan:
    choices: dict[str, ToolChoice] = field(default_factory=dict)
    writes: list[ToolWrite] = field(default_factory=list)


def plan_tools(
    tools: list[FileTool],
    existing: dict[str, dict[str, Any]],
    mcp_tools: dict[tuple[str, str], str],
    import_id: str,
    override_existing: bool,
) -> ToolsPlan:
    """`existing`: O's user tools by name; `mcp_tools`: MCP tools' ids by (server, name),
    of registered servers and of those the import registers."""
    plan = ToolsPlan()
    names = [t.name for t in tools if t.name not in SCHEMAS and t.source_code]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise HTTPException(422, f"the agent file has two tools named '{repeated[0]}'")
    for tool in tools:
        plan.choices[tool.id] = _choose(
            tool, existing, mcp_tools, import_id, override_existing, plan
        )
    return plan


def _choose(
    tool: FileTool,
    existing: dict[str, dict[str, Any]],
    mcp_tools: dict[tuple[str, str], str],
    import_id: str,
    override_existing: bool,
    plan: ToolsPlan,
) -> ToolChoice:
    if tool.name in SCHEMAS:
        return ToolChoice("builtin", tool.name)
    if tool.tool_type == "external_mcp":
        server = server_name_of(tool)
        tool_id = mcp_tools.get((server or "", tool.name))
        if tool_id is None:
            return _left_out(tool, f"no MCP server '{server}' here or in the file offers it")
        return ToolChoice("user", tool.name, tool_id)
    if (tool.tool_type or "custom").startswith("letta_") or not tool.source_code:
        return _left_out(tool, "a Letta built-in tool O does not have")
    if tool.source_type not in PYTHON_SOURCES:
        return _left_out(tool, f"its source is {tool.source_type}; O runs Python tools only")
    schema = checked_schema(tool)
    fields = _fields(tool, schema)
    row = existing.get(tool.name)
    if row is None:
        tool_id = derived_id("tool", import_id, tool.id)
        plan.writes.append(ToolWrite(tool_id, ToolCreated(tool_id=tool_id, **fields), 0))
        return ToolChoice("user", tool.name, tool_id)
    if override_existing:
        # Written even when nothing changes: a retry of this import finds it by its id and
        # leaves the tool alone (it used to override an edit made since the first try).
        changes = {k: v for k, v in fields.items() if k != "name" and row.get(k) != v}
        event = ToolUpdated(tool_id=row["id"], changes=changes)
        once = derived_id("evt", import_id, row["id"], "override")
        plan.writes.append(ToolWrite(row["id"], event, row["last_seq"], once))
    return ToolChoice("user", tool.name, row["id"])


def _left_out(tool: FileTool, why: str) -> ToolChoice:
    return ToolChoice("left_out", tool.name, reason=f"tool '{tool.name}' ({tool.id}): {why}")


def checked_schema(tool: FileTool) -> dict[str, Any]:
    """The tool's JSON schema: the file's (checked against the source), else derived.

    The source is parsed, never run: it must define the function its schema names.
    """
    where = f"tool '{tool.name}' ({tool.id})"
    source = tool.source_code or ""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise HTTPException(
            422, f"{where}: source_code does not parse: {exc.msg} (line {exc.lineno})"
        ) from exc
    except ValueError as exc:  # (a NUL byte, which the body checks stop first)
        raise HTTPException(422, f"{where}: source_code does not parse: {exc}") from exc
    if tool.json_schema is None:
        try:
            return derive_schema(source, tool.name)
        except ToolSourceError as exc:
            raise HTTPException(422, f"{where}: {exc}") from exc
    schema = dict(tool.json_schema)
    name = schema.setdefault("name", tool.name)
    if name != tool.name:
        raise HTTPException(422, f"{where}: its json_schema names another function, '{name}'")
    params = schema.setdefault("parameters", {"type": "object", "properties": {}})
    if not isinstance(params, dict):
        raise HTTPException(422, f"{where}: json_schema.parameters is not an object")
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    if tool.name not in defined:
        raise HTTPException(422, f"{where}: source_code defines no function named '{tool.name}'")
    return schema


def _fields(tool: FileTool, schema: dict[str, Any]) -> dict[str, Any]:
    """A ToolCreated's fields (but its id) for the file's tool."""
    return {
        "name": tool.name,
        "description": tool.description or schema.get("description"),
        "source_type": "python",
        "source_code": tool.source_code,
        "json_schema": schema,
        "tags": list(tool.tags or []),
        "return_char_limit": tool.return_char_limit or 50000,
        "default_requires_approval": bool(tool.default_requires_approval),
        "metadata": dict(tool.metadata_ or {}),
        "pip_requirements": [r.model_dump() for r in tool.pip_requirements or []],
    }
