"""MCP server registry events, appended by the gateway on `o.evt.mcp_server.<mcp_server_id>`.

A server's auth token, custom header values and stdio environment values are
secrets: they travel here only as Fernet ciphertext under `O_SECRETS_KEY`
(o_runtime/tool_secrets.py), because the log is kept forever and read by every
service. Header names and environment variable names stay readable.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from o_contracts.base import Event

McpServerType = Literal["stdio", "sse", "streamable_http"]


class McpServerCreated(Event):
    mcp_server_id: str
    server_name: str
    server_type: McpServerType
    # stdio: the program users bring and its arguments.
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    # sse and streamable_http.
    server_url: str | None = None
    auth_header: str | None = None
    encrypted_auth_token: str | None = None
    encrypted_custom_headers: dict[str, str] | None = None
    encrypted_env: dict[str, str] | None = None


class McpServerUpdated(Event):
    """Only the fields present in `changes` changed; keys are McpServerCreated's fields
    (secrets already encrypted)."""

    mcp_server_id: str
    changes: dict[str, Any]


class McpServerDeleted(Event):
    mcp_server_id: str


class McpToolOffered(BaseModel):
    """One tool as the server listed it, with the id agents attach it by."""

    tool_id: str
    name: str
    description: str | None = None
    # The tool's input schema as an OpenAI-style function schema (name, description,
    # parameters), the shape every other tool in O has.
    json_schema: dict[str, Any]


class McpServerToolsSynced(Event):
    """The server was asked what tools it offers: `tools` is the whole answer and
    replaces what was recorded before. Ids derive from (server id, tool name), so a
    tool that stays across syncs keeps its id and the agents it is attached to."""

    mcp_server_id: str
    tools: list[McpToolOffered]
