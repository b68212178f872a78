"""Request bodies of the Letta v1 API (unknown fields are ignored, as Letta does)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CreateBlockBody(Body):
    label: str = Field(min_length=1, max_length=128)
    value: str = ""
    limit: int = Field(default=100000, ge=1)
    description: str | None = None
    read_only: bool = False
    metadata: dict[str, Any] | None = None
    tags: list[str] | None = None


class UpdateBlockBody(Body):
    label: str | None = Field(default=None, min_length=1, max_length=128)
    value: str | None = None
    limit: int | None = Field(default=None, ge=1)
    description: str | None = None
    read_only: bool | None = None
    metadata: dict[str, Any] | None = None
    tags: list[str] | None = None


AgentType = Literal["letta_v1_agent", "memgpt_v2_agent", "memgpt_agent"]


class ToolRuleBody(Body):
    model_config = ConfigDict(extra="allow")
    type: str
    tool_name: str


class CreateToolBody(Body):
    source_code: str = Field(min_length=1, max_length=200_000)
    description: str | None = None
    tags: list[str] | None = None
    source_type: Literal["python"] = "python"
    json_schema: dict[str, Any] | None = None
    args_json_schema: dict[str, Any] | None = None
    return_char_limit: int = Field(default=50000, ge=1, le=1_000_000)
    pip_requirements: list[dict[str, Any]] | None = None
    default_requires_approval: bool | None = None
    # O's extension: safe to run twice, so a call interrupted by a dying sandbox is retried once.
    idempotent: bool = False
    metadata_: dict[str, Any] | None = None


class UpdateToolBody(Body):
    source_code: str | None = Field(default=None, min_length=1, max_length=200_000)
    description: str | None = None
    tags: list[str] | None = None
    json_schema: dict[str, Any] | None = None
    return_char_limit: int | None = Field(default=None, ge=1, le=1_000_000)
    pip_requirements: list[dict[str, Any]] | None = None
    default_requires_approval: bool | None = None
    idempotent: bool | None = None
    metadata_: dict[str, Any] | None = None


# Environment variable names a tool may receive (POSIX-portable, not empty).
SecretName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)]
Secrets = dict[SecretName, Annotated[str, StringConstraints(max_length=65536)]]


class CreateAgentBody(Body):
    name: str | None = Field(default=None, pattern=r"^[\w '\-]+$", max_length=256)
    system: str | None = None
    agent_type: AgentType = "letta_v1_agent"
    model: str | None = None
    embedding: str | None = None
    llm_config: dict[str, Any] | None = None
    embedding_config: dict[str, Any] | None = None
    context_window_limit: int | None = Field(default=None, ge=1024)
    memory_blocks: list[CreateBlockBody] = Field(default_factory=list)
    block_ids: list[str] = Field(default_factory=list)
    tools: list[str] = Field(default_factory=list)
    tool_ids: list[str] = Field(default_factory=list)
    tool_rules: list[ToolRuleBody] = Field(default_factory=list)
    include_base_tools: bool = True
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] | None = None
    description: str | None = None
    timezone: str | None = None
    # Letta's two names for an agent's tool environment; both are accepted.
    tool_exec_environment_variables: Secrets | None = None
    secrets: Secrets | None = None


class UpdateAgentBody(Body):
    name: str | None = Field(default=None, pattern=r"^[\w '\-]+$", max_length=256)
    system: str | None = None
    model: str | None = None
    embedding: str | None = None
    llm_config: dict[str, Any] | None = None
    embedding_config: dict[str, Any] | None = None
    context_window_limit: int | None = Field(default=None, ge=1024)
    block_ids: list[str] | None = None
    tool_rules: list[ToolRuleBody] | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    description: str | None = None
    timezone: str | None = None
    tool_ids: list[str] | None = None
    tool_exec_environment_variables: Secrets | None = None
    secrets: Secrets | None = None


class TextPart(Body):
    type: Literal["text"] = "text"
    text: str


class MessageCreateBody(Body):
    type: Literal["message"] | None = None
    role: Literal["user", "system", "assistant"] = "user"
    content: str | list[TextPart]
    name: str | None = None
    otid: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class ApprovalItemBody(Body):
    """One answer: {"type": "approval", approve, reason} or a client's {"type": "tool", ...}."""

    type: Literal["approval", "tool"] = "approval"
    tool_call_id: str
    approve: bool | None = None
    reason: str | None = None
    tool_return: Any = None
    status: Literal["success", "error"] = "success"


class ApprovalCreateBody(Body):
    type: Literal["approval"]
    approvals: list[ApprovalItemBody] | None = None
    # Deprecated single-answer form: applies to every call of that request.
    approve: bool | None = None
    approval_request_id: str | None = None
    reason: str | None = None


class ClientToolBody(Body):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None


class SendMessageBody(Body):
    messages: list[ApprovalCreateBody | MessageCreateBody] | None = None
    client_tools: list[ClientToolBody] | None = None
    input: str | None = None
    max_steps: int = Field(default=50, ge=1, le=1000)
    streaming: bool = False
    stream_tokens: bool = False
    include_pings: bool = True
    include_return_message_types: list[str] | None = None
    use_assistant_message: bool = True
    assistant_message_tool_name: str = "send_message"
    assistant_message_tool_kwarg: str = "message"
    background: bool = False


class CancelRunsBody(Body):
    run_ids: list[str] | None = None
