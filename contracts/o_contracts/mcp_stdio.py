"""Asking a stdio MCP server something, through the tool sandbox that runs it.

`o.rpc.sandbox.mcp_stdio` (core NATS request/reply, MessagePack, not persisted): the
gateway (listing, refresh, a tool run from the API) and the executor (an agent's call)
send an `McpStdioRequest`; a sandbox replica starts the server if it is not running
(confined like a user tool), asks it, and answers with an `McpStdioReply`. The request
carries everything the sandbox needs (it has no database); the server's environment
travels as Fernet ciphertext and is decrypted only in the sandbox. A reply with
`ok=False` says why the server could not be asked (not started, crashed, no answer in
time); a tool that ran and failed is `ok=True, is_error=True`.
"""

from __future__ import annotations

from typing import Any, Literal

import msgpack
from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Packed(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed


class StdioServerSpec(_Packed):
    """How to start one registered stdio server (as the registry holds it)."""

    mcp_server_id: str
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    # Variable name -> Fernet ciphertext of its value.
    encrypted_env: dict[str, str] = Field(default_factory=dict)


class McpStdioRequest(_Packed):
    """List a stdio MCP server's tools, or call one of them."""

    server: StdioServerSpec
    operation: Literal["list_tools", "call_tool"]
    tool_name: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Seconds the caller waits, starting the server included; the sandbox bounds a call
    # further (O_MCP_STDIO_CALL_SECONDS).
    timeout: float = Field(default=30.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _names_a_tool_to_call(self) -> McpStdioRequest:
        if self.operation == "call_tool" and not self.tool_name:
            raise ValueError("call_tool needs a tool_name")
        return self

    @classmethod
    def decode(cls, data: bytes) -> McpStdioRequest:
        return cls.model_validate(msgpack.unpackb(data, raw=False))


class McpToolListing(_Packed):
    """One tool as the server lists it."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=dict)


class McpStdioReply(_Packed):
    """The server's tools or the tool's text; or, with ok=False, why it could not be asked."""

    ok: bool
    # Why the server could not be asked (ok=False).
    error: str | None = None
    tools: list[McpToolListing] = Field(default_factory=list)
    # A tool call's text content, and whether the tool said it failed.
    text: str = ""
    is_error: bool = False
    # The sandbox replica that answered.
    sandbox: str = ""

    @classmethod
    def decode(cls, data: bytes) -> McpStdioReply:
        return cls.model_validate(msgpack.unpackb(data, raw=False))
