"""Value types shared by several events and commands."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from o_contracts.ids import derived_id

Role = Literal["system", "user", "assistant", "tool"]


class Value(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BlockSpec(Value):
    """Everything that defines a core memory block, as created."""

    label: str = Field(min_length=1, max_length=128)
    value: str = ""
    # (a Postgres integer column holds it)
    limit: int = Field(default=100000, ge=1, le=2**31 - 1)
    description: str | None = None
    read_only: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)


class ToolCall(Value):
    id: str
    name: str
    # The model's raw argument string: kept verbatim, because it is what the
    # model said (and may be malformed JSON, which is the tool's error to report).
    arguments: str

    def argument_object(self) -> dict[str, Any]:
        """The arguments as a JSON object; ValueError (for the model to read) if they are not."""
        parsed = json.loads(self.arguments or "{}")
        if not isinstance(parsed, dict):
            raise ValueError("arguments are not a JSON object")
        return parsed

    def wants_heartbeat(self) -> bool:
        """Whether a memgpt agent asked for another step after this call."""
        try:
            return self.argument_object().get("request_heartbeat") is True
        except ValueError:
            return False


class TextPart(Value):
    type: Literal["text"] = "text"
    text: str


# Images the providers O speaks to (OpenAI, Anthropic) take.
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


class ImagePart(Value):
    """An image in a message: bytes held in the object store, or a URL.

    An image sent as data is put in the `O_IMAGES` object store under the SHA-256 of its
    bytes (hex) before the command that names it is sent, so events stay small (an image
    is up to `limits.MAX_IMAGE_BYTES`, over NATS' payload); the executor reads the bytes
    back for the provider. An image sent as a URL goes to the provider as that URL: O
    never fetches it.
    """

    type: Literal["image"] = "image"
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    size: int | None = Field(default=None, ge=0)
    url: str | None = None
    media_type: str | None = None
    # Letta's `detail` (low, high, auto), passed on to the provider.
    detail: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ImagePart:
        if (self.sha256 is None) == (self.url is None):
            raise ValueError("an image is either stored (sha256) or a url, not both or neither")
        return self


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class ChatMessage(Value):
    """One message of an agent's conversation, provider-neutral.

    Stored as the model saw or said it; the API renders it into Letta's
    message types (assistant_message, tool_call_message, ...).
    """

    id: str
    role: Role
    content: str | None = None
    # Set when the message is more than text (a user's images, a client tool's image
    # result): every part in order. `content` then holds the text parts joined, for
    # what reads text only (search, token estimates, summaries).
    parts: list[ContentPart] | None = None
    reasoning: str | None = None
    # The provider's signature of `reasoning` (Anthropic's extended thinking), which
    # must go back with it on the next request of a tool loop.
    reasoning_signature: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    otid: str | None = None
    # Assistant messages only: its tool calls wait for a person's approval (or,
    # for client tools, for the client's result) instead of running.
    approval_request: bool | None = None
    # With approval_request: the calls that wait for an answer. The others are
    # held (as in Letta) and run once those are answered. None: all of them.
    approval_tool_call_ids: list[str] | None = None
    # Tool returns only.
    status: Literal["success", "error"] | None = None
    stdout: list[str] | None = None
    stderr: list[str] | None = None
    # The answers a run opened with (Letta's approval message), shown where they were
    # given; a run never reads this message back: its RunStarted holds them.
    approvals: list[ApprovalDecision] | None = None

    def awaiting(self, call: ToolCall) -> bool:
        """Whether `call` (one of this approval request's) waits for an answer."""
        return bool(self.approval_request) and (
            self.approval_tool_call_ids is None or call.id in self.approval_tool_call_ids
        )


class ClientSkill(Value):
    """A skill the client offers for one request only (Letta's client_skills)."""

    name: str
    description: str | None = None
    location: str | None = None


class ApprovalDecision(Value):
    """A person's answer to a pending tool call: approve or deny (with a reason), or,
    for a client tool, the result the client computed."""

    tool_call_id: str
    approve: bool = True
    reason: str | None = None
    # Set when the client ran the tool itself.
    tool_return: str | None = None
    # A client tool's result given as content parts with images (tool_return: its text).
    tool_return_parts: list[ContentPart] | None = None
    status: Literal["success", "error"] = "success"


class Usage(Value):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    # Of prompt_tokens: those the provider read from its prompt cache, and those it wrote
    # to it (Anthropic); None where it did not say (Letta's cached_input_tokens and
    # cache_write_tokens).
    cached_input_tokens: int | None = None
    cache_write_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_input_tokens=_plus(self.cached_input_tokens, other.cached_input_tokens),
            cache_write_tokens=_plus(self.cache_write_tokens, other.cache_write_tokens),
        )


def _plus(a: int | None, b: int | None) -> int | None:
    """A sum of counts some steps may not have (None only if none has)."""
    return None if a is None and b is None else (a or 0) + (b or 0)


class ToolRule(Value):
    """A Letta tool rule; `type` names the rule, the other fields depend on it."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str
    tool_name: str


ChatMessage.model_rebuild()  # (approvals names a class defined after it)


def answers_message(run_id: str, approvals: list[ApprovalDecision]) -> ChatMessage:
    """The message that shows the answers a run opened with (its id derives from the run's)."""
    return ChatMessage(
        id=derived_id("message", run_id, "approvals"), role="user", approvals=approvals
    )
