"""An agent file's MCP servers, decided into what an import registers.

Letta's export names each server an agent's tools come from, with its type and address
and never its credentials (MCPServerSchema: no token, no custom headers, a stdio
server's `env` stripped); its import registers each server by name and upserts the
server's tools from the file. O does the same, with one difference where Letta's
behaviour would be unsafe:

- A server whose name O has not registered is registered from the file:
  `McpServerCreated` (stdio: its command and arguments; sse and streamable_http: its
  address, checked as a client's would be), then `McpServerToolsSynced` with the tools
  the file lists for it (their schemas as the file has them), so the agent's MCP tools
  exist without asking the server during the import. A later refresh asks the server
  and keeps the tools' ids (they derive from server id and tool name, as a live sync's
  do). It has no token, headers or environment values: the import says so.
- A server of that name already registered is used as it is. Letta would update its
  address from the file and keep its token: a shared file could then send the token to
  an address of its choosing. O leaves it alone and says so when the file's address
  differs.

A stdio server registered from a file is a program the file names; it runs only in the
tool sandbox, confined as users' tools are (docs/mcp.md), as the file's own tools do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException
from pydantic import ValidationError

from o_contracts.events import McpServerCreated, McpServerToolsSynced
from o_contracts.events.mcp_servers import McpToolOffered
from o_contracts.ids import derived_id
from o_gateway.agent_files.schema import AgentFile, FileMcpServer, FileTool
from o_gateway.mcp_registry import server_created
from o_gateway.mcp_schemas import HttpConfig, StdioConfig

MCP_TYPE = "external_mcp"
SERVER_TYPES = ("stdio", "sse", "streamable_http")


@dataclass(frozen=True)
class NewMcpServer:
    server_id: str
    created: McpServerCreated
    # The tools the file lists for it; None when it lists none.
    synced: McpServerToolsSynced | None


@dataclass
class McpPlan:
    servers: list[NewMcpServer] = field(default_factory=list)
    # The tools of the servers this import registers: their ids by (server, tool name).
    tools: dict[tuple[str, str], str] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)


def mcp_server_id_of(import_id: str, file_ref: str) -> str:
    return derived_id("mcp_server", import_id, file_ref)


def server_name_of(tool: FileTool) -> str | None:
    """The server an MCP tool comes from: Letta keeps it in metadata_["mcp"] and tags the
    tool `mcp:<server name>`."""
    origin = (tool.metadata_ or {}).get("mcp")
    if isinstance(origin, dict) and isinstance(origin.get("server_name"), str):
        return str(origin["server_name"])
    for tag in tool.tags or []:
        if tag.startswith("mcp:"):
            return tag[len("mcp:") :]
    return None


def plan_mcp_servers(
    file: AgentFile,
    registered: dict[str, dict[str, Any]],
    import_id: str,
    allow_private_urls: bool,
) -> McpPlan:
    """`registered`: O's MCP servers by name (not this import's own)."""
    plan = McpPlan()
    names = [s.server_name for s in file.mcp_servers]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise HTTPException(422, f"the agent file has two MCP servers named '{repeated[0]}'")
    for server in file.mcp_servers:
        row = registered.get(server.server_name)
        if row is not None:
            if _address(server) != _address_of_row(row):
                plan.left_out.append(
                    f"MCP server '{server.server_name}' ({server.id}): a server of that name is"
                    f" registered here ({row['id']}) and is used as it is; the file's address"
                    " was not applied"
                )
            continue
        tools = [
            t
            for t in file.tools
            if t.tool_type == MCP_TYPE and server_name_of(t) == server.server_name
        ]
        new = _new_server(server, tools, import_id, allow_private_urls)
        plan.servers.append(new)
        for offered in new.synced.tools if new.synced else []:
            plan.tools[(server.server_name, offered.name)] = offered.tool_id
        plan.left_out.append(
            f"MCP server '{server.server_name}' ({server.id}): registered without a token,"
            " headers or environment values (agent files carry none); set them with"
            f" PATCH /v1/mcp-servers/{new.server_id} if it needs any"
        )
    return plan


def _address(server: FileMcpServer) -> tuple[Any, ...]:
    config = server.stdio_config or {}
    return (server.server_type, server.server_url, config.get("command"), config.get("args"))


def _address_of_row(row: dict[str, Any]) -> tuple[Any, ...]:
    stdio = row["server_type"] == "stdio"
    return (
        row["server_type"],
        row["server_url"],
        row["command"] if stdio else None,
        list(row["args"] or []) if stdio else None,
    )


def _new_server(
    server: FileMcpServer, tools: list[FileTool], import_id: str, allow_private_urls: bool
) -> NewMcpServer:
    where = f"MCP server '{server.server_name}' ({server.id})"
    server_id = mcp_server_id_of(import_id, server.id)
    if server.server_type not in SERVER_TYPES:
        raise HTTPException(
            422,
            f"{where}: server_type '{server.server_type}' is not one of {', '.join(SERVER_TYPES)}",
        )
    try:
        config: StdioConfig | HttpConfig
        if server.server_type == "stdio":
            stdio = server.stdio_config or {}
            # Letta strips env on export; a file that has one brings its values.
            config = StdioConfig.model_validate(
                {k: stdio[k] for k in ("command", "args", "env") if k in stdio}
            )
        else:
            config = HttpConfig.model_validate({"server_url": server.server_url})
        created = server_created(
            server_id,
            server.server_name,
            server.server_type,
            config,
            allow_private_urls=allow_private_urls,
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        field_name = ".".join(str(p) for p in error["loc"])
        raise HTTPException(422, f"{where}: {field_name}: {error['msg']}") from exc
    except HTTPException as exc:
        raise HTTPException(exc.status_code, f"{where}: {exc.detail}") from exc
    offered = [_offered(server_id, t, where) for t in tools]
    names = [t.name for t in offered]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise HTTPException(422, f"{where}: the file lists its tool '{repeated[0]}' twice")
    synced = McpServerToolsSynced(mcp_server_id=server_id, tools=offered) if offered else None
    return NewMcpServer(server_id, created, synced)


def _offered(server_id: str, tool: FileTool, where: str) -> McpToolOffered:
    """The file's MCP tool as its server offered it (a live sync's id for it)."""
    where = f"{where}, tool '{tool.name}' ({tool.id})"
    schema = dict(tool.json_schema or {})
    if not schema:
        raise HTTPException(422, f"{where}: it has no json_schema")
    if schema.setdefault("name", tool.name) != tool.name:
        raise HTTPException(422, f"{where}: its json_schema names another function")
    parameters = schema.setdefault("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict):
        raise HTTPException(422, f"{where}: json_schema.parameters is not an object")
    return McpToolOffered(
        tool_id=derived_id("tool", "mcp", server_id, tool.name),
        name=tool.name,
        description=tool.description or schema.get("description"),
        json_schema=schema,
    )
