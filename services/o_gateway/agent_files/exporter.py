"""An agent as an agent file (Letta's AgentFileSchema), read from the projections.

The file holds the agent, the agents of the group it manages (a sleep-time
agent's companion), their blocks and tools (users' tools with their source,
built-in tools by name, MCP tools with their server's name and address, never
its credentials), tool rules, model settings, their folders with their files'
texts (folders_export.py), and messages: the context window
(`in_context_message_ids`, system prompt first) and the latest
`RECENT_MESSAGES` besides, as Letta exports them. Secrets are listed by name
with empty values. Ids are the file's own (`agent-0`, `block-0` ...).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from o_contracts.directories import limits_of
from o_contracts.models import ChatMessage
from o_contracts.subjects import Lane
from o_gateway import render
from o_gateway.agent_files.folders_export import (
    AgentFolders,
    agent_folders,
    files_of,
    render_file,
    render_links,
    render_source,
)
from o_gateway.agent_files.letta_messages import to_letta
from o_gateway.agent_reads import blocks_of
from o_gateway.conversation_reads import lane_in_context, lane_messages
from o_gateway.group_reads import managed_group
from o_gateway.images import image_data
from o_gateway.mcp_registry import server_by_id
from o_gateway.state import Gateway
from o_gateway.tool_registry import render_user_tool, user_tools
from o_gateway.tools_catalog import tool_state

# Letta exports an agent's latest 50 messages beside its context window.
RECENT_MESSAGES = 50


class FileIds:
    """The file's ids for O's: `<kind>-<n>`, numbered in the order they are first met."""

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}
        self._counts: defaultdict[str, int] = defaultdict(int)

    def of(self, kind: str, o_id: str) -> str:
        if o_id not in self._ids:
            self._ids[o_id] = f"{kind}-{self._counts[kind]}"
            self._counts[kind] += 1
        return self._ids[o_id]


async def export_agent(
    gw: Gateway,
    agent_id: str,
    conversation_id: str | None = None,
    scrub_messages: bool = False,
    skills: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    ids = FileIds()
    rows = [await gw.agent_row(agent_id)]
    group = await managed_group(gw.pool, agent_id)
    if group is not None:
        for member in group["agent_ids"]:
            row = await gw.pool.fetchrow("SELECT * FROM agents WHERE id = $1", member)
            if row is not None and member != agent_id:
                rows.append(dict(row))
    for row in rows:
        ids.of("agent", row["id"])
    tools: dict[str, dict[str, Any]] = {}
    blocks: dict[str, dict[str, Any]] = {}
    mcp_servers: dict[str, dict[str, Any]] = {}
    folders: dict[str, dict[str, Any]] = {}
    agents = []
    for row in rows:
        agent_blocks = await blocks_of(gw, row["id"])
        for b in agent_blocks:
            blocks[b["id"]] = render.block(b)
        agent_tools = [tool_state(n) for n in row["tools"]]
        agent_tools += [render_user_tool(t) for t in await user_tools(gw, list(row["tool_ids"]))]
        for t in agent_tools:
            tools[t["id"]] = t
            server = (t.get("metadata_") or {}).get("mcp", {}).get("server_id")
            if t["tool_type"] == "external_mcp" and server:
                mcp_servers[server] = await _mcp_server(gw, server)
        lane = Lane(row["id"], conversation_id if row["id"] == agent_id else None)
        messages = [] if scrub_messages else await _messages(gw, lane)
        own = await agent_folders(gw, row["id"])
        folders |= {f["id"]: f for f in own.folders}
        agents.append((row, agent_blocks, agent_tools, messages, own))
    # Letta orders tools by name and blocks by label; their file ids follow that order.
    tool_list = sorted(tools.values(), key=lambda t: (t["name"], t["id"]))
    block_list = sorted(blocks.values(), key=lambda b: (b["label"], b["id"]))
    for t in tool_list:
        ids.of("tool", t["id"])
    for b in block_list:
        ids.of("block", b["id"])
    for server_id in mcp_servers:
        ids.of("mcp_server", server_id)
    for folder_id in folders:
        ids.of("source", folder_id)
    files = await files_of(gw, list(folders))
    for f in files:
        ids.of("file", f["id"])
    group_ids = [ids.of("group", group["id"])] if group is not None else []
    return {
        "agents": [
            await _agent(
                gw, ids, row, agent_blocks, agent_tools, messages, own, group_ids if i == 0 else []
            )
            for i, (row, agent_blocks, agent_tools, messages, own) in enumerate(agents)
        ],
        "groups": [_group(ids, group)] if group is not None else [],
        "blocks": [{**b, "id": ids.of("block", b["id"])} for b in block_list],
        "files": [render_file(ids, f) for f in files],
        "sources": [render_source(ids, f) for f in folders.values()],
        "tools": [{**t, "id": ids.of("tool", t["id"])} for t in tool_list],
        "mcp_servers": [
            {**s, "id": ids.of("mcp_server", server_id)} for server_id, s in mcp_servers.items()
        ],
        "skills": skills or [],
        "metadata": {"revision_id": f"o-{render.VERSION}"},
        "created_at": datetime.now(UTC).isoformat(),
    }


async def _messages(gw: Gateway, lane: Lane) -> list[Any]:
    """The lane's context window and its latest messages, in order (rows)."""
    in_context = await lane_in_context(gw.pool, lane)
    recent = await lane_messages(gw, lane, None, None, RECENT_MESSAGES, "desc")
    by_id = {r["id"]: r for r in [*recent, *in_context]}
    return sorted(by_id.values(), key=lambda r: r["seq"])


async def _agent(
    gw: Gateway,
    ids: FileIds,
    row: dict[str, Any],
    agent_blocks: list[dict[str, Any]],
    agent_tools: list[dict[str, Any]],
    messages: list[Any],
    own: AgentFolders,
    group_ids: list[str],
) -> dict[str, Any]:
    file_id = ids.of("agent", row["id"])
    max_files_open, char_limit = limits_of(row["llm_config"])
    chats = [ChatMessage.model_validate(m["body"]) for m in messages]
    images = await image_data(gw, chats)
    entries = [
        to_letta(c, ids.of("message", c.id), file_id, m["created_at"], images)
        for c, m in zip(chats, messages, strict=True)
    ]
    secret_names = sorted(row.get("encrypted_secrets") or {})
    return {
        "name": row["name"],
        "memory_blocks": [],
        "tools": [],
        "tool_ids": [ids.of("tool", t["id"]) for t in agent_tools],
        "source_ids": [ids.of("source", f["id"]) for f in own.folders],
        "block_ids": [ids.of("block", b["id"]) for b in agent_blocks],
        "tool_rules": row["tool_rules"] or [],
        "tags": row["tags"] or [],
        "system": row["system"],
        "agent_type": row["agent_type"],
        "llm_config": row["llm_config"],
        "embedding_config": row["embedding_config"],
        "initial_message_sequence": None,
        "include_base_tools": False,
        "include_multi_agent_tools": False,
        "include_base_tool_rules": False,
        "include_default_source": False,
        "description": row["description"],
        "metadata": row["metadata"] or {},
        "model": None,
        "embedding": None,
        "context_window_limit": None,
        "max_tokens": None,
        "enable_reasoner": False,
        "tool_exec_environment_variables": dict.fromkeys(secret_names, ""),
        "secrets": dict.fromkeys(secret_names, ""),
        "message_buffer_autoclear": False,
        "enable_sleeptime": bool(row.get("enable_sleeptime")),
        "response_format": None,
        "timezone": row["timezone"] or "UTC",
        "max_files_open": max_files_open,
        "per_file_view_window_char_limit": char_limit,
        "hidden": None,
        "id": file_id,
        "in_context_message_ids": [ids.of("message", m["id"]) for m in messages if m["in_context"]],
        "messages": entries,
        "files_agents": render_links(ids, file_id, row["id"], row["llm_config"], own.links),
        # The group it manages (only the exported agent manages the file's group).
        "group_ids": group_ids,
    }


def _group(ids: FileIds, group: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"manager_type": group["manager_type"]}
    if group["manager_agent_id"] is not None:
        config["manager_agent_id"] = ids.of("agent", group["manager_agent_id"])
    for name in ("sleeptime_agent_frequency", "max_turns", "termination_token"):
        if group[name] is not None:
            config[name] = group[name]
    return {
        "agent_ids": [ids.of("agent", a) for a in group["agent_ids"]],
        "description": group["description"],
        "manager_config": config,
        "project_id": None,
        "shared_block_ids": [],
        "hidden": group["hidden"],
        "id": ids.of("group", group["id"]),
    }


async def _mcp_server(gw: Gateway, server_id: str) -> dict[str, Any]:
    """Letta's MCPServerSchema: the server's name and address, never its credentials."""
    server = await server_by_id(gw, server_id)
    # Letta's StdioServerConfig without its env (values are secrets, as Letta strips them).
    stdio = (
        {
            "server_name": server.server_name,
            "type": "stdio",
            "command": server.command,
            "args": list(server.args),
        }
        if server.server_type == "stdio"
        else None
    )
    return {
        "server_type": server.server_type,
        "server_name": server.server_name,
        "server_url": server.server_url,
        "stdio_config": stdio,
        "metadata_": None,
    }
