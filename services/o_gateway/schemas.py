"""Request bodies of the Letta v1 API (unknown fields are ignored, as Letta does).

Every field is bounded (o_contracts.limits; the README's "Limits" section lists
them): what a client sends must fit in the commands and events it becomes, under
NATS' 1 MiB payload, and in the Postgres columns that hold it. Before these models
run, the gateway has already checked the whole body for what cannot be stored at
all (NUL, lone surrogates, integers beyond int64, nesting; o_gateway.guards).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    TypeAdapter,
    field_validator,
    model_validator,
)

from o_contracts.agent_types import DEFAULT_AGENT_TYPE, AgentType
from o_contracts.callback_urls import CallbackUrl
from o_contracts.concurrency import Concurrency
from o_contracts.limits import (
    INT32_MAX,
    MAX_CLIENT_TOOLS,
    MAX_DESCRIPTION_CHARS,
    MAX_LABEL_CHARS,
    MAX_LIST_ITEMS,
    MAX_MEMORY_BLOCKS,
    MAX_MESSAGES_PER_REQUEST,
    MAX_NAME_CHARS,
    MAX_OBJECT_BYTES,
    MAX_TAG_CHARS,
    MAX_TAGS,
    MAX_TEXT_BYTES,
    check_storable,
    client_tools_over_limit,
    input_over_limit,
    utf8_len,
)
from o_contracts.models import ContentPart
from o_contracts.models import TextPart as ContractTextPart
from o_contracts.pip_requirements import MAX_REQUIREMENTS, PipRequirement
from o_gateway.image_parts import ImagePartBody, without_image_data
from o_gateway.model_settings import ModelSettingsBody


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


def _bounded_object(value: Any) -> Any:
    check_storable(value, max_bytes=MAX_OBJECT_BYTES)
    return value


# A text: a message, a block value, a system prompt (at most 256 KiB as UTF-8; the
# gateway counts bytes, the schema can only say characters).
Text = Annotated[str, Field(max_length=MAX_TEXT_BYTES, description="At most 262144 bytes as UTF-8")]
Name = Annotated[str, StringConstraints(max_length=MAX_NAME_CHARS)]
Description = Annotated[str, StringConstraints(max_length=MAX_DESCRIPTION_CHARS)]
Tags = Annotated[
    list[Annotated[str, StringConstraints(max_length=MAX_TAG_CHARS)]],
    Field(max_length=MAX_TAGS),
]
Ids = Annotated[list[Name], Field(max_length=MAX_LIST_ITEMS)]
# A structured value set by a client (metadata, llm_config, a JSON schema ...).
Object = Annotated[
    dict[str, Any],
    AfterValidator(_bounded_object),
    Field(description="At most 65536 bytes as JSON"),
]


# A block's `limit` is a Postgres `integer`.
BlockLimit = Annotated[int, Field(ge=1, le=INT32_MAX)]


class CreateBlockBody(Body):
    label: str = Field(min_length=1, max_length=MAX_LABEL_CHARS)
    value: Text = ""
    limit: BlockLimit = 100000
    description: Description | None = None
    read_only: bool = False
    metadata: Object | None = None
    tags: Tags | None = None


class UpdateBlockBody(Body):
    label: str | None = Field(default=None, min_length=1, max_length=MAX_LABEL_CHARS)
    value: Text | None = None
    limit: BlockLimit | None = None
    description: Description | None = None
    read_only: bool | None = None
    metadata: Object | None = None
    tags: Tags | None = None


class ToolRuleBody(Body):
    model_config = ConfigDict(extra="allow")
    type: str = Field(max_length=64)
    tool_name: Name

    @model_validator(mode="after")
    def _bounded(self) -> ToolRuleBody:
        # Its other fields are kept as given (extra="allow"): bound them together.
        if self.model_extra:
            check_storable(self.model_extra, max_bytes=MAX_OBJECT_BYTES)
        return self


# Packages a tool imports, installed by the sandbox (o_contracts/pip_requirements.py).
PipRequirements = Annotated[list[PipRequirement], Field(max_length=MAX_REQUIREMENTS)]


class CreateToolBody(Body):
    source_code: str = Field(min_length=1, max_length=200_000)
    description: Description | None = None
    tags: Tags | None = None
    source_type: Literal["python"] = "python"
    json_schema: Object | None = None
    args_json_schema: Object | None = None
    return_char_limit: int = Field(default=50000, ge=1, le=1_000_000)
    pip_requirements: PipRequirements | None = None
    default_requires_approval: bool | None = None
    # O's extension: safe to run twice, so a call interrupted by a dying sandbox is retried once.
    idempotent: bool = False
    metadata_: Object | None = None


class UpdateToolBody(Body):
    source_code: str | None = Field(default=None, min_length=1, max_length=200_000)
    description: Description | None = None
    tags: Tags | None = None
    json_schema: Object | None = None
    return_char_limit: int | None = Field(default=None, ge=1, le=1_000_000)
    pip_requirements: PipRequirements | None = None
    default_requires_approval: bool | None = None
    idempotent: bool | None = None
    metadata_: Object | None = None


# Environment variable names a tool may receive (POSIX-portable, not empty).
SecretName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)]
# All of an agent's secrets together are held to MAX_OBJECT_BYTES (they are encrypted
# into the agent's events).
Secrets = Annotated[
    dict[SecretName, Annotated[str, StringConstraints(max_length=65536)]],
    AfterValidator(_bounded_object),
]


AgentName = Annotated[str, Field(pattern=r"^[\w '\-]+$", max_length=MAX_NAME_CHARS)]
ContextWindow = Annotated[int, Field(ge=1024, le=INT32_MAX)]
Timezone = Annotated[str, StringConstraints(max_length=64)]


class CreateAgentBody(Body):
    name: AgentName | None = None
    system: Text | None = None
    agent_type: AgentType = DEFAULT_AGENT_TYPE
    model: Name | None = None
    embedding: Name | None = None
    llm_config: Object | None = None
    embedding_config: Object | None = None
    context_window_limit: ContextWindow | None = None
    memory_blocks: list[CreateBlockBody] = Field(default_factory=list, max_length=MAX_MEMORY_BLOCKS)
    block_ids: Ids = Field(default_factory=list)
    tools: Ids = Field(default_factory=list)
    tool_ids: Ids = Field(default_factory=list)
    tool_rules: list[ToolRuleBody] = Field(default_factory=list, max_length=MAX_LIST_ITEMS)
    include_base_tools: bool = True
    # Letta's three tools for messaging other agents (o_contracts.base_tools).
    include_multi_agent_tools: bool = False
    tags: Tags = Field(default_factory=list)
    metadata: Object | None = None
    description: Description | None = None
    timezone: Timezone | None = None
    # Letta's two names for an agent's tool environment; both are accepted.
    tool_exec_environment_variables: Secrets | None = None
    secrets: Secrets | None = None
    # Messages the default conversation starts with, after the system message.
    initial_message_sequence: list[MessageCreateBody] | None = Field(
        default=None, max_length=MAX_LIST_ITEMS
    )
    model_settings: ModelSettingsBody | None = None
    # Letta's older spellings of settings model_settings now holds.
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    max_reasoning_tokens: int | None = Field(default=None, ge=0, le=10_000_000)
    enable_reasoner: bool | None = None
    # A sleep-time companion keeps the agent's memory (o_gateway/sleeptime.py).
    enable_sleeptime: bool | None = None
    # An O extension: what a message arriving mid-run does by default
    # (o_contracts/concurrency.py); None: the route's policy (Letta's).
    concurrency: Concurrency | None = None
    # Letta's identities the agent serves (routes/identities.py); on an update, the whole set.
    identity_ids: Ids | None = None


class UpdateAgentBody(Body):
    name: AgentName | None = None
    system: Text | None = None
    model: Name | None = None
    embedding: Name | None = None
    llm_config: Object | None = None
    embedding_config: Object | None = None
    context_window_limit: ContextWindow | None = None
    block_ids: Ids | None = None
    tool_rules: list[ToolRuleBody] | None = Field(default=None, max_length=MAX_LIST_ITEMS)
    tags: Tags | None = None
    metadata: Object | None = None
    description: Description | None = None
    timezone: Timezone | None = None
    tool_ids: Ids | None = None
    tool_exec_environment_variables: Secrets | None = None
    secrets: Secrets | None = None
    model_settings: ModelSettingsBody | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    enable_sleeptime: bool | None = None
    # (As on create; null sets it back to none.)
    concurrency: Concurrency | None = None
    # The agent's identities, the whole set ([] clears them).
    identity_ids: Ids | None = None


class TextPart(Body):
    type: Literal["text"] = "text"
    text: Text


# A message's content: text, or parts (text and images).
Content = Text | Annotated[list[TextPart | ImagePartBody], Field(max_length=MAX_LIST_ITEMS)]


def content_text(content: Content) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, TextPart))


def content_parts(content: Content) -> list[ContentPart] | None:
    """The content as parts when it holds images (stored first: o_gateway/images.py)."""
    if isinstance(content, str) or not any(isinstance(p, ImagePartBody) for p in content):
        return None
    return [
        p.stored() if isinstance(p, ImagePartBody) else ContractTextPart(text=p.text)
        for p in content
    ]


class MessageCreateBody(Body):
    type: Literal["message"] | None = None
    role: Literal["user", "system", "assistant"] = "user"
    content: Content
    name: Name | None = None
    otid: Name | None = None

    def text(self) -> str:
        return content_text(self.content)

    def parts(self) -> list[ContentPart] | None:
        return content_parts(self.content)


class ApprovalItemBody(Body):
    """One answer: {"type": "approval", approve, reason} or a client's {"type": "tool", ...}."""

    type: Literal["approval", "tool"] = "approval"
    tool_call_id: Name
    approve: bool | None = None
    reason: Text | None = None
    # A client tool's result: text, content parts (text and images), or JSON sent on as text.
    tool_return: Any = None
    status: Literal["success", "error"] = "success"
    _parts: list[TextPart | ImagePartBody] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _image_parts(self) -> ApprovalItemBody:
        # Letta's multi-modal tool returns: a list of text and image parts.
        value = self.tool_return
        if isinstance(value, list) and any(
            isinstance(v, dict) and v.get("type") == "image" for v in value
        ):
            self._parts = _RETURN_PARTS.validate_python(value)
        return self

    def return_parts(self) -> list[TextPart | ImagePartBody] | None:
        """The result as parts when it holds images, else None."""
        return self._parts

    def parts(self) -> list[ContentPart] | None:
        """The result's parts for the run (its images stored first: o_gateway/images.py)."""
        if self._parts is None:
            return None
        return [
            p.stored() if isinstance(p, ImagePartBody) else ContractTextPart(text=p.text)
            for p in self._parts
        ]

    def text(self) -> str:
        """The result as text: the text of its parts, or JSON for other values."""
        if isinstance(self.tool_return, str):
            return self.tool_return
        if self._parts is not None:
            return "".join(p.text for p in self._parts if isinstance(p, TextPart))
        return json.dumps(self.tool_return)


_RETURN_PARTS = TypeAdapter(
    Annotated[list[TextPart | ImagePartBody], Field(max_length=MAX_LIST_ITEMS)]
)


class ApprovalCreateBody(Body):
    type: Literal["approval"]
    approvals: Annotated[list[ApprovalItemBody], Field(max_length=MAX_LIST_ITEMS)] | None = None
    # Deprecated single-answer form: applies to every call of that request.
    approve: bool | None = None
    approval_request_id: Name | None = None
    reason: Text | None = None


class ClientToolBody(Body):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: Description | None = None
    parameters: Object | None = None


def _input_bytes(body: SendMessageBody) -> int:
    """The text a request brings into a run (one StartRun command, one RunStarted event)."""
    total = utf8_len(content_text(body.input)) if body.input else 0
    for m in body.messages or ():
        if isinstance(m, MessageCreateBody):
            # (Images are not text: their bytes go to the object store, not in the command.)
            total += utf8_len(m.text())
        else:
            total += utf8_len(m.reason or "")
            for a in m.approvals or ():
                total += utf8_len(a.reason or "")
                if a.tool_return is not None:
                    total += check_storable(without_image_data(a.tool_return))
    return total


class ClientSkillBody(Body):
    name: Name
    description: Description | None = None
    location: Name | None = None


class SendMessageBody(Body):
    messages: (
        Annotated[
            list[ApprovalCreateBody | MessageCreateBody],
            Field(max_length=MAX_MESSAGES_PER_REQUEST),
        ]
        | None
    ) = None
    client_tools: Annotated[list[ClientToolBody], Field(max_length=MAX_CLIENT_TOOLS)] | None = None
    # One user message's content (Letta's shorthand for `messages`).
    input: Content | None = None
    max_steps: int = Field(default=50, ge=1, le=1000)
    streaming: bool = False
    stream_tokens: bool = False
    include_pings: bool = True
    include_return_message_types: Ids | None = None
    use_assistant_message: bool = True
    assistant_message_tool_name: Name = "send_message"
    assistant_message_tool_kwarg: Name = "message"
    background: bool = False
    # This request's system prompt, sent to the model as given (Letta also reads `system`).
    override_system: Text | None = Field(
        default=None, validation_alias=AliasChoices("override_system", "system")
    )
    client_skills: Annotated[list[ClientSkillBody], Field(max_length=MAX_LIST_ITEMS)] | None = None
    # A model handle for this request only (the agent keeps its own).
    override_model: Name | None = None
    # An O extension: what this message does if a run of its conversation is in flight
    # (o_contracts/concurrency.py); None: the agent's default, else the route's.
    concurrency: Concurrency | None = None

    @model_validator(mode="after")
    def _bounded_input(self) -> SendMessageBody:
        if self.input is not None and self.messages is not None:
            raise ValueError("Cannot specify both 'input' and 'messages'. Use one or the other.")
        too_much = input_over_limit(_input_bytes(self))
        if too_much:
            raise ValueError(too_much)
        if self.client_tools:
            tools = [t.model_dump(exclude_none=True) for t in self.client_tools]
            too_much = client_tools_over_limit(check_storable(tools))
            if too_much:
                raise ValueError(too_much)
        return self


class AsyncMessageBody(SendMessageBody):
    """Letta's LettaAsyncRequest: a message run in the background, its outcome POSTed to
    `callback_url` when it ends (docs/callbacks.md)."""

    callback_url: CallbackUrl | None = None


class CancelRunsBody(Body):
    run_ids: Ids | None = None


class StepFeedbackBody(Body):
    """Letta's ModifyFeedbackRequest: feedback null clears it; tags replace the step's
    when some are given."""

    feedback: Literal["positive", "negative"] | None = None
    tags: Tags | None = None


class ConversationMessageBody(SendMessageBody):
    """A message to a conversation: streamed unless `streaming` is false (Letta's default)."""

    agent_id: Name | None = None
    streaming: bool = True


def _checked_handle(model: str | None) -> str | None:
    if not model:
        return model
    provider, _, name = model.partition("/")
    if not provider or not name:
        raise ValueError("The model handle should be in the format provider/model-name")
    return model


class CreateConversationBody(Body):
    summary: Text | None = None
    isolated_block_labels: Ids | None = None
    model: Name | None = None
    model_settings: ModelSettingsBody | None = None

    _model = field_validator("model")(_checked_handle)


class UpdateConversationBody(Body):
    summary: Text | None = None
    model: Name | None = None
    model_settings: ModelSettingsBody | None = None

    _model = field_validator("model")(_checked_handle)


class AgentIdBody(Body):
    """Names the agent for the default conversation (`/v1/conversations/default/...`)."""

    agent_id: Name | None = None


class RetrieveStreamBody(AgentIdBody):
    """Resume a background run's stream (POST /v1/runs/{id}/stream, or a conversation's):
    the chunks after seq_id `starting_after` (streaming.Numbering)."""

    run_id: Name | None = None
    otid: Name | None = None
    starting_after: int = 0
    include_pings: bool = True
    # Letta polls Redis with these; O follows the log as it grows (accepted, unused).
    poll_interval: float | None = None
    batch_size: int | None = None


class ResetMessagesBody(Body):
    add_default_initial_messages: bool = False


class CompactBody(AgentIdBody):
    compaction_settings: Object | None = None
