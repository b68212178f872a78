"""Request/reply reads over core NATS (not persisted): their payloads, MessagePack.

`SearchArchival` goes to `o.rpc.memory.archival_search`; the answer is an
`ArchivalResults`. Both the gateway's search route and the agents'
`archival_memory_search` tool use it, so both validate the same way.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

import msgpack
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from o_contracts.commands import StartRun
from o_contracts.models import ChatMessage
from o_contracts.pip_requirements import MAX_REQUIREMENTS, PipRequirement


class SearchArchival(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Whose passages: an agent's archival memory (its own and its archives'); without it,
    # one archive's (`archive_id`), or, with neither, every passage (Letta's
    # POST /v1/passages/search). Only an agent's search is recorded as an access.
    agent_id: str | None
    query: str
    archive_id: str | None = None
    tags: list[str] = Field(default_factory=list)
    tag_match_mode: Literal["any", "all"] = "any"
    # Letta's default (its RETRIEVAL_QUERY_DEFAULT_PAGE_SIZE).
    top_k: int = Field(default=5, ge=1, le=100)
    start_datetime: datetime | None = None
    end_datetime: datetime | None = None
    # "stream": recency + importance + relevance (the default); "relevance": relevance only.
    ranking: Literal["stream", "relevance"] = "stream"
    # Read-your-writes: wait until the archival projection has applied this sequence.
    min_seq: int = 0

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("query must not be empty")
        return v

    @field_validator("tags")
    @classmethod
    def _tags_not_blank(cls, v: list[str]) -> list[str]:
        if any(not t.strip() for t in v):
            raise ValueError("tags must be non-empty strings")
        return v

    @field_validator("start_datetime", "end_datetime")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        # A date without a zone is read as UTC, as Letta does.
        return v.replace(tzinfo=UTC) if v is not None and v.tzinfo is None else v

    @model_validator(mode="after")
    def _ordered(self) -> SearchArchival:
        if self.start_datetime and self.end_datetime and self.start_datetime > self.end_datetime:
            raise ValueError("start_datetime is after end_datetime")
        return self

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed


def first_error(exc: Exception) -> str:
    """A pydantic ValidationError as one line a person (or a model) can act on."""
    errors = getattr(exc, "errors", None)
    if errors is None:
        return str(exc)
    err = errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


class ArchivalResults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool
    status: int = 200
    error: str | None = None
    results: list[dict[str, Any]] = Field(default_factory=list)

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed

    @classmethod
    def decode(cls, data: bytes) -> ArchivalResults:
        return cls.model_validate(msgpack.unpackb(data, raw=False))


class Generate(BaseModel):
    """`o.rpc.executor.generate`: one completion with an agent's model, outside any run
    (POST /v1/agents/{id}/generate): no memory, no tools, nothing recorded."""

    model_config = ConfigDict(extra="forbid")

    handle: str
    # The agent's llm_config (its model settings apply); empty with override_model.
    llm_config: dict[str, Any] = Field(default_factory=dict)
    prompt: str
    system_prompt: str | None = None
    # A JSON schema the answer must follow (asked for as a forced tool call, as Letta).
    response_schema: dict[str, Any] | None = None

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed


# A request to `o.rpc.executor.generate`, `o.rpc.memory.search_archival`,
# `o.rpc.memory.search_files` or `o.rpc.sandbox.mcp_stdio` carrying the header WANTS_TAKER
# (any value) is answered twice: at once, an empty message whose TAKEN_BY header names the
# process that took it (the incarnation on its liveness subject, `alive_subject(<role>,
# ...)`), then the answer. The asker watches that process while it waits and asks again if
# it dies (o_runtime/watched_requests.py). Without the header: one answer.
WANTS_TAKER = "O-Wants-Taker"
TAKEN_BY = "O-Taken-By"
# The longest anyone waits for a Generated (the gateway's generate routes; the provider's
# own retries included): the executor may answer for this long (o_setup/roles.py).
GENERATE_WITHIN = 600.0


class Generated(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool
    status: int = 200
    error: str | None = None
    content: str = ""
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed

    @classmethod
    def decode(cls, data: bytes) -> Generated:
        return cls.model_validate(msgpack.unpackb(data, raw=False))


class ReadContext(BaseModel):
    """`o.rpc.executor.context`: what the agent's next prompt holds (GET .../context)."""

    model_config = ConfigDict(extra="forbid")

    agent_id: str
    # Read-your-writes: wait until the runs projection has applied this sequence.
    min_seq: int = 0

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed


class ContextOverview(BaseModel):
    """Letta's ContextWindowOverview, token counts estimated offline; `messages` are the
    in-context messages as stored (the gateway renders them)."""

    context_window_size_max: int
    context_window_size_current: int
    num_messages: int
    num_archival_memory: int
    num_recall_memory: int
    num_tokens_external_memory_summary: int
    external_memory_summary: str
    num_tokens_system: int
    system_prompt: str
    num_tokens_core_memory: int
    core_memory: str
    num_tokens_tool_usage_rules: int = 0
    tool_usage_rules: str | None = None
    num_tokens_summary_memory: int = 0
    summary_memory: str | None = None
    num_tokens_functions_definitions: int
    functions_definitions: list[dict[str, Any]] = Field(default_factory=list)
    num_tokens_messages: int
    messages: list[ChatMessage] = Field(default_factory=list)


class ContextRead(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool
    status: int = 200
    error: str | None = None
    overview: ContextOverview | None = None

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed

    @classmethod
    def decode(cls, data: bytes) -> ContextRead:
        return cls.model_validate(msgpack.unpackb(data, raw=False))


class PreviewRun(BaseModel):
    """`o.rpc.executor.preview`: the request a run's first model call would send its
    provider, built by the agent loop on the agent as it is and not sent; nothing recorded
    (POST .../messages/preview-raw-payload)."""

    model_config = ConfigDict(extra="forbid")

    command: StartRun
    # Read-your-writes: wait until the runs projection has applied this sequence.
    min_seq: int = 0

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed


class RunPreviewed(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool
    status: int = 200
    error: str | None = None
    # The request's body, as the provider's API takes it (OpenAI's Chat Completions or
    # Anthropic's Messages).
    payload: dict[str, Any] | None = None

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed

    @classmethod
    def decode(cls, data: bytes) -> RunPreviewed:
        return cls.model_validate(msgpack.unpackb(data, raw=False))


class ExecutionStatus(BaseModel):
    """`o.rpc.sandbox.executions` (every replica hears it): who holds this tool execution?

    Only a replica that runs it, or ran it lately, answers, with an `ExecutionState`. The
    executor asks while it waits for a call (a replica that died answers no more) and
    when it resumes a run whose call was in progress (o_executor/sandbox_calls.py).
    """

    model_config = ConfigDict(extra="forbid")

    execution_id: str

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed

    @classmethod
    def decode(cls, data: bytes) -> ExecutionStatus:
        return cls.model_validate(msgpack.unpackb(data, raw=False))


class ExecutionState(BaseModel):
    """A sandbox's answer about one execution (to `o.rpc.sandbox.run` and `.executions`).

    `done`: `outcome` is the `ToolExecuted` or `ToolExecutionFailed` envelope, which the
    executor records; `running`: still going; `refused`: the request was not a `RunTool`
    it can run (`error` says why).
    """

    model_config = ConfigDict(extra="forbid")

    state: Literal["running", "done", "refused"]
    replica: str = ""
    outcome: bytes | None = None
    error: str | None = None

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(), use_bin_type=True)
        return packed

    @classmethod
    def decode(cls, data: bytes) -> ExecutionState:
        return cls.model_validate(msgpack.unpackb(data, raw=False))


class PreparePackages(BaseModel):
    """`o.rpc.sandbox.prepare` (every replica hears it, none answers): install this set of
    packages now, so the first call that names it does not wait for pip.

    The gateway sends it when a tool with `pip_requirements` is registered or changed (its
    set as a run will name it: the tool's and the local sandbox configuration's). Only a hint:
    a replica that misses it installs the set at the first call, as it would anyway.
    """

    model_config = ConfigDict(extra="forbid")

    requirements: list[PipRequirement] = Field(max_length=MAX_REQUIREMENTS)

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed

    @classmethod
    def decode(cls, data: bytes) -> PreparePackages:
        return cls.model_validate(msgpack.unpackb(data, raw=False))
