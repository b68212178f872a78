"""Conversation events, appended by the gateway on `o.evt.agent.<agent_id>.conv.<conversation_id>`.

An agent has many conversations, each with its own in-context messages and
its own run order, all sharing the agent's memory. The default conversation
(Letta's agent-level routes) has no events of its own: it is the agent's
subject. A conversation's runs are recorded on its subject with the usual run
events (events/runs.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from o_contracts.base import Event
from o_contracts.models import ChatMessage


class ConversationCreated(Event):
    conversation_id: str
    agent_id: str
    # The conversation's first message: the agent's system prompt compiled with
    # its memory as it stood when the conversation began.
    system_message: ChatMessage
    summary: str | None = None
    # A model handle ("provider/model") this conversation's runs use instead of the agent's.
    model: str | None = None
    model_settings: dict[str, Any] | None = None
    # Forked from this conversation ("" names the agent's default one): the
    # new conversation starts with every message in that one's context (the
    # same messages, shared, after its own system message) as the log stood at
    # this event.
    forked_from: str | None = None
    # Blocks of this conversation's own (Letta's isolated_block_labels): copies of the
    # agent's blocks with those labels, made before this event. In this conversation
    # they take the place of the agent's blocks with the same labels, in its prompts
    # and for its memory tools; other conversations do not see them.
    isolated_block_ids: list[str] = Field(default_factory=list)


class ConversationUpdated(Event):
    """Only the fields present in `changes` changed (summary, model, model_settings)."""

    conversation_id: str
    agent_id: str
    changes: dict[str, Any]


class ConversationDeleted(Event):
    """Soft delete: its messages stay in the agent's history; it can no longer be used."""

    conversation_id: str
    agent_id: str


class MessagesReset(Event):
    """The default conversation's context was cleared (Letta's reset-messages): every
    message but the system prompt left it (they stay in the history), and the
    system message was recompiled with the agent's memory as it stood then."""

    agent_id: str
    system_message_id: str | None = None
    system_prompt: str | None = None


class SystemPromptRecompiled(Event):
    """A conversation's system message now shows the agent's current memory.

    On the agent's subject for the default conversation (`conversation_id`
    None), else on the conversation's. The message keeps its id.
    """

    agent_id: str
    conversation_id: str | None = None
    message_id: str
    content: str
    recompiled_at: str = Field(description="ISO time the prompt's metadata names")
