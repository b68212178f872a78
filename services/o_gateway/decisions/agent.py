"""The agent as its decisions see it, read on a checked connection.

A decision reads only what it needs: every change reads the agent's row; block
commands also read its attached blocks, tool commands the names of its user
tools. The connection comes from `gw.reads.at(...)` (o_runtime/reads.py), so
these rows are at least as new as the log position the decision appends after.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import asyncpg

from o_gateway.decisions.commands import (
    AgentChange,
    AttachBlock,
    AttachTool,
    DetachBlock,
    SetToolApproval,
    UserTool,
)


@dataclass(frozen=True)
class AttachedBlock:
    id: str
    label: str


@dataclass(frozen=True)
class AgentView:
    """An existing agent's state, as far as one decision needs it.

    `blocks` and `user_tool_names` are read only for the commands that need
    them (`reads_blocks`, `reads_tool_names`); for others they are empty.
    """

    id: str
    tools: tuple[str, ...] = ()  # built-in tools, by name
    tool_ids: tuple[str, ...] = ()  # user tools, by id
    tool_rules: tuple[dict[str, Any], ...] = ()
    blocks: tuple[AttachedBlock, ...] = ()
    # The names of the agent's user tools that still exist, in tool_ids order.
    user_tool_names: tuple[str, ...] = ()
    llm_config: dict[str, Any] = field(default_factory=dict)
    agent_type: str = ""


def reads_blocks(command: AgentChange) -> bool:
    return isinstance(command, AttachBlock | DetachBlock)


def reads_tool_names(command: AgentChange) -> bool:
    # Attaching a user tool checks its name is free; approval names any tool.
    if isinstance(command, AttachTool):
        return isinstance(command.tool, UserTool)
    return isinstance(command, SetToolApproval)


_AGENT = "SELECT tools, tool_ids, tool_rules, llm_config, agent_type FROM agents WHERE id = $1"
_BLOCKS = (
    "SELECT b.id, b.label FROM agent_blocks ab JOIN blocks b ON b.id = ab.block_id"
    " WHERE ab.agent_id = $1"
)
_TOOL_NAMES = "SELECT id, name FROM tools WHERE id = ANY($1)"


async def read_agent(conn: asyncpg.Connection, command: AgentChange) -> AgentView | None:
    """What `command` decides on, read on `conn`; None if the agent does not exist."""
    row = await conn.fetchrow(_AGENT, command.agent_id)
    if row is None:
        return None
    tool_ids = tuple(row["tool_ids"])
    blocks: tuple[AttachedBlock, ...] = ()
    if reads_blocks(command):
        rows = await conn.fetch(_BLOCKS, command.agent_id)
        blocks = tuple(AttachedBlock(id=r["id"], label=r["label"]) for r in rows)
    names: tuple[str, ...] = ()
    if reads_tool_names(command) and tool_ids:
        found = {r["id"]: r["name"] for r in await conn.fetch(_TOOL_NAMES, list(tool_ids))}
        # Ids of deleted tools are skipped (tool_registry.user_tools).
        names = tuple(found[i] for i in tool_ids if i in found)
    return AgentView(
        id=command.agent_id,
        tools=tuple(row["tools"]),
        tool_ids=tool_ids,
        tool_rules=tuple(row["tool_rules"]),
        blocks=blocks,
        user_tool_names=names,
        llm_config=dict(row["llm_config"] or {}),
        agent_type=row["agent_type"],
    )
