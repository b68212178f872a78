"""Agent registry events, appended by the gateway on `o.evt.agent.<agent_id>`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from o_contracts.base import Event
from o_contracts.concurrency import Concurrency
from o_contracts.models import ChatMessage, ToolRule, Value


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


class ImportedMessage(Value):
    """One message of an imported agent's history, as the agent file had it."""

    message: ChatMessage
    # When it was said (the file's created_at); None: when it was imported.
    created_at: datetime | None = None
    # Whether the agent still had it in its context window (the file's
    # in_context_message_ids); the others are history only (listed, searched).
    in_context: bool = True


class MessagesImported(Event):
    """Part of the history an agent file brought, in order, right after its AgentCreated.

    Appended by the gateway on the agent's subject, one event per part (a long
    history does not fit in one NATS message), each expecting the subject's
    previous position; its id derives from the agent's and the part's, so a
    retried import appends each part once. Messages sit after the agent's
    system message, in file order.
    """

    agent_id: str
    part: int = Field(ge=0)
    messages: list[ImportedMessage]
