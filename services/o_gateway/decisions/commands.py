"""What a client asks of an agent, as typed inputs: one dataclass per decision.

A route builds one from the request (o_gateway.agent_requests: the checks and
look-ups a request needs, such as resolving tools by name) and hands it to
`append.py`. Everything in one is already known to be well formed; what still
depends on the agent's state at the moment of deciding (is the block already
attached? is the tool's name taken?) is for `decide.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from o_contracts.concurrency import Concurrency
from o_contracts.models import BlockSpec, ChatMessage


@dataclass(frozen=True)
class UserTool:
    """A user tool (a `tools` row) as agent decisions need it."""

    id: str
    name: str
    # The tool's default_requires_approval: attaching it adds a requires_approval
    # rule for the agent, as Letta does.
    requires_approval: bool

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> UserTool:
        return cls(
            id=row["id"], name=row["name"], requires_approval=bool(row["default_requires_approval"])
        )


@dataclass(frozen=True)
class BuiltinTool:
    """A built-in tool (o_contracts.base_tools), named in `agents.tools`, not in the registry."""

    name: str


@dataclass(frozen=True)
class NewBlock:
    """A block created with its agent, by a command to the memory service."""

    block_id: str
    spec: BlockSpec
    # Derived from the Idempotency-Key, so a retry is the same command; else None.
    command_id: str | None


@dataclass(frozen=True)
class CreateAgent:
    agent_id: str
    name: str
    system: str
    agent_type: str
    llm_config: dict[str, Any]
    embedding_config: dict[str, Any] | None
    tools: list[str]  # built-in tools, by name
    user_tools: list[UserTool]
    # As the request gave them: checked when deciding, after the new blocks are
    # created (today's order of errors; see decide.create_agent).
    tool_rules: list[dict[str, Any]]
    metadata: dict[str, Any] | None
    new_blocks: list[NewBlock]
    block_ids: list[str]  # existing blocks, attached as well
    tags: list[str]
    description: str | None
    timezone: str
    encrypted_secrets: dict[str, str]
    # The request's checked Idempotency-Key: a retry whose first try created the
    # agent is answered as that one was.
    idempotency_key: str | None
    # The default conversation's opening: the compiled system prompt, then
    # Letta's initial_message_sequence.
    system_message: ChatMessage | None = None
    initial_messages: list[ChatMessage] = field(default_factory=list)
    enable_sleeptime: bool | None = None
    concurrency: Concurrency | None = None


@dataclass(frozen=True)
class AgentChanges:
    """A PATCH of an agent: None leaves a field as it is.

    The fields are in the order today's AgentUpdated.changes lists them, so the
    events stay byte for byte what they were.
    """

    name: str | None = None
    system: str | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    description: str | None = None
    timezone: str | None = None
    tool_rules: list[dict[str, Any]] | None = None
    llm_config: dict[str, Any] | None = None
    embedding_config: dict[str, Any] | None = None
    block_ids: list[str] | None = None
    tools: list[str] | None = None
    tool_ids: list[str] | None = None
    encrypted_secrets: dict[str, str] | None = None
    enable_sleeptime: bool | None = None
    # The agent's default concurrency policy; "" sets it back to none (the route's).
    concurrency: Concurrency | Literal[""] | None = None

    def as_event_changes(self) -> dict[str, Any]:
        """AgentUpdated.changes: only what is set."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}


@dataclass(frozen=True)
class UpdateAgent:
    agent_id: str
    changes: AgentChanges
    # Model settings to set on the agent's llm_config (the new one, if `changes` has
    # one, else the agent's own, as the decision reads it).
    llm_settings: dict[str, Any] | None = None


@dataclass(frozen=True)
class DeleteAgent:
    agent_id: str


@dataclass(frozen=True)
class AttachBlock:
    agent_id: str
    block_id: str
    label: str  # the block's label: an agent's blocks have different labels


@dataclass(frozen=True)
class DetachBlock:
    agent_id: str
    block_id: str


@dataclass(frozen=True)
class AttachTool:
    agent_id: str
    tool: BuiltinTool | UserTool


@dataclass(frozen=True)
class DetachTool:
    agent_id: str
    tool_id: str
    # The built-in tool `tool_id` names, if it names one. A user tool is not
    # looked up: detaching one the agent does not have changes nothing.
    builtin: BuiltinTool | None


@dataclass(frozen=True)
class SetToolApproval:
    """Whether calls of `tool_name` wait for a person: a requires_approval rule on the agent."""

    agent_id: str
    tool_name: str
    requires_approval: bool


# A change to an existing agent: decided on its state, appended with the
# expected subject sequence (append.change_agent).
AgentChange = (
    UpdateAgent
    | DeleteAgent
    | AttachBlock
    | DetachBlock
    | AttachTool
    | DetachTool
    | SetToolApproval
)
