"""Agent registry events, appended by the gateway on `o.evt.agent.<agent_id>`."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from o_contracts.base import Event
from o_contracts.concurrency import Concurrency
from o_contracts.models import ChatMessage, ToolRule


class AgentCreated(Event):
    agent_id: str
    name: str
    system: str
    agent_type: str
    llm_config: dict[str, Any]
    embedding_config: dict[str, Any] | None = None
    tools: list[str] = Field(default_factory=list)
    tool_rules: list[ToolRule] = Field(default_factory=list)
    block_ids: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    description: str | None = None
    timezone: str | None = None
    # User tools (registry ids) attached at creation; later ones by ToolAttached.
    tool_ids: list[str] = Field(default_factory=list)
    # Tool secrets, Fernet-encrypted with O_SECRETS_KEY (see o_runtime.tool_secrets):
    # the log never holds a secret in plaintext. AgentUpdated carries the same
    # shape under changes["encrypted_secrets"].
    encrypted_secrets: dict[str, str] = Field(default_factory=dict)
    # The default conversation's first message: the system prompt compiled with
    # the agent's memory at creation (absent from agents created before O had it).
    system_message: ChatMessage | None = None
    # Letta's initial_message_sequence: messages placed after it, in order.
    initial_messages: list[ChatMessage] = Field(default_factory=list)
    # Letta's flag: memory is kept by a sleep-time companion (a managed group names it).
    enable_sleeptime: bool | None = None
    # What a message that arrives while a run is in flight does by default (an O
    # extension, o_contracts/concurrency.py); None: what the route does (Letta's).
    # AgentUpdated sets it under changes["concurrency"] ("" for None).
    concurrency: Concurrency | None = None


class AgentUpdated(Event):
    """Only the fields present in `changes` changed (a PATCH)."""

    agent_id: str
    changes: dict[str, Any]


class AgentDeleted(Event):
    agent_id: str


class BlockAttached(Event):
    agent_id: str
    block_id: str


class BlockDetached(Event):
    agent_id: str
    block_id: str


class ToolAttached(Event):
    agent_id: str
    tool_id: str
    # The tool's default_requires_approval, applied at attach time as a
    # requires_approval rule for this agent (as Letta does); `tool_name` names it.
    requires_approval: bool = False
    tool_name: str | None = None


class ToolDetached(Event):
    agent_id: str
    tool_id: str
