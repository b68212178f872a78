"""Agent decisions: given the agent's state and a command, the event to append.

Pure functions, no I/O: each returns the event, None when there is nothing to
change (attaching what is attached), or raises Refused. `append.py` reads the
state they are given and appends what they return.
"""

from __future__ import annotations

from typing import assert_never

from o_contracts.base import Event
from o_contracts.base_tools import BASE_TOOLS, MEMORY_EDIT_TOOLS
from o_contracts.events import (
    AgentCreated,
    AgentDeleted,
    AgentUpdated,
    BlockAttached,
    BlockDetached,
    ToolAttached,
    ToolDetached,
)
from o_contracts.models import ToolRule
from o_gateway.decisions.agent import AgentView
from o_gateway.decisions.checks import (
    Refused,
    check_unique_names,
    checked_metadata,
    checked_rules,
)
from o_gateway.decisions.commands import (
    AgentChange,
    AttachBlock,
    AttachTool,
    BuiltinTool,
    CreateAgent,
    DeleteAgent,
    DetachBlock,
    DetachTool,
    SetToolApproval,
    UpdateAgent,
)


def create_agent(command: CreateAgent) -> AgentCreated:
    """The new agent (its rules and metadata checked), decided before its new blocks are
    created, so that a refused request leaves no block behind."""
    rules = [ToolRule.model_validate(r) for r in checked_rules(command.tool_rules)]
    # Tools that ask for approval by default do so for this agent (Letta's rule).
    rules += [
        ToolRule(type="requires_approval", tool_name=t.name)
        for t in command.user_tools
        if t.requires_approval
    ]
    return AgentCreated(
        agent_id=command.agent_id,
        name=command.name,
        system=command.system,
        agent_type=command.agent_type,
        llm_config=command.llm_config,
        embedding_config=command.embedding_config,
        tools=command.tools,
        tool_rules=rules,
        block_ids=[b.block_id for b in command.new_blocks] + command.block_ids,
        tags=command.tags,
        metadata=checked_metadata(command.metadata),
        description=command.description,
        timezone=command.timezone,
        tool_ids=[t.id for t in command.user_tools],
        encrypted_secrets=command.encrypted_secrets,
        system_message=command.system_message,
        initial_messages=command.initial_messages,
        enable_sleeptime=command.enable_sleeptime,
        concurrency=command.concurrency,
    )


def change_agent(command: AgentChange, agent: AgentView | None) -> Event | None:
    """The event `command` makes of an existing agent (None: the agent does not exist)."""
    if agent is None:
        raise Refused(f"Agent {command.agent_id} not found", 404)
    match command:
        case UpdateAgent():
            return update_agent(command, agent)
        case DeleteAgent():
            return AgentDeleted(agent_id=command.agent_id)
        case AttachBlock():
            return attach_block(command, agent)
        case DetachBlock():
            return detach_block(command, agent)
        case AttachTool():
            return attach_tool(command, agent)
        case DetachTool():
            return detach_tool(command, agent)
        case SetToolApproval():
            return set_tool_approval(command, agent)
        case _:
            assert_never(command)


def update_agent(command: UpdateAgent, agent: AgentView) -> AgentUpdated | None:
    changes = command.changes.as_event_changes()
    if command.changes.enable_sleeptime is not None and "tools" not in changes:
        tools = sleeptime_tools(agent, command.changes.enable_sleeptime)
        if tools != list(agent.tools):
            changes["tools"] = tools
    if command.llm_settings:
        changes["llm_config"] = (
            changes.get("llm_config") or agent.llm_config
        ) | command.llm_settings
    return AgentUpdated(agent_id=command.agent_id, changes=changes) if changes else None


def sleeptime_tools(agent: AgentView, enabled: bool) -> list[str]:
    """The agent's built-in tools with its memory kept by a companion (or by itself again)."""
    if enabled:
        return [t for t in agent.tools if t not in MEMORY_EDIT_TOOLS]
    own = [t for t in BASE_TOOLS.get(agent.agent_type, []) if t in MEMORY_EDIT_TOOLS]
    return list(dict.fromkeys([*agent.tools, *own]))


def attach_block(command: AttachBlock, agent: AgentView) -> BlockAttached | None:
    if any(b.id == command.block_id for b in agent.blocks):
        return None
    if any(b.label == command.label for b in agent.blocks):
        raise Refused(
            f"agent {command.agent_id} already has a block labelled '{command.label}'", 409
        )
    return BlockAttached(agent_id=command.agent_id, block_id=command.block_id)


def detach_block(command: DetachBlock, agent: AgentView) -> BlockDetached:
    if not any(b.id == command.block_id for b in agent.blocks):
        raise Refused(f"Block {command.block_id} is not attached to agent {command.agent_id}", 404)
    return BlockDetached(agent_id=command.agent_id, block_id=command.block_id)


def attach_tool(command: AttachTool, agent: AgentView) -> AgentUpdated | ToolAttached | None:
    tool = command.tool
    if isinstance(tool, BuiltinTool):
        # Built-in tools are a list of names on the agent: the whole list changes.
        if tool.name in agent.tools:
            return None
        return AgentUpdated(agent_id=command.agent_id, changes={"tools": [*agent.tools, tool.name]})
    if tool.id in agent.tool_ids:
        return None
    check_unique_names(agent.tools, [*agent.user_tool_names, tool.name])
    return ToolAttached(
        agent_id=command.agent_id,
        tool_id=tool.id,
        requires_approval=tool.requires_approval,
        tool_name=tool.name,
    )


def detach_tool(command: DetachTool, agent: AgentView) -> AgentUpdated | ToolDetached | None:
    if command.builtin is not None:
        name = command.builtin.name
        if name not in agent.tools:
            return None
        kept = [n for n in agent.tools if n != name]
        return AgentUpdated(agent_id=command.agent_id, changes={"tools": kept})
    if command.tool_id not in agent.tool_ids:
        return None
    return ToolDetached(agent_id=command.agent_id, tool_id=command.tool_id)


def set_tool_approval(command: SetToolApproval, agent: AgentView) -> AgentUpdated | None:
    name = command.tool_name
    if name not in set(agent.tools) | set(agent.user_tool_names):
        raise Refused(f"agent {command.agent_id} has no tool named '{name}'", 404)
    rules = [
        r
        for r in agent.tool_rules
        if not (r.get("type") == "requires_approval" and r.get("tool_name") == name)
    ]
    if command.requires_approval:
        rules.append({"type": "requires_approval", "tool_name": name})
    if rules == list(agent.tool_rules):
        return None
    return AgentUpdated(agent_id=command.agent_id, changes={"tool_rules": rules})
