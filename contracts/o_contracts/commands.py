"""Commands: requests to the service that owns the decision.

Published to the commands stream with `Nats-Msg-Id` = the envelope id (so a
retried send is deduplicated) and, when the sender waits for the outcome, an
`O-Reply-To` header naming a core NATS inbox for the `Reply`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from o_contracts import limits
from o_contracts.base import Command
from o_contracts.callback_urls import CallbackUrl
from o_contracts.ids import derived_id
from o_contracts.models import ApprovalDecision, BlockSpec, ChatMessage, ClientSkill
from o_contracts.pip_requirements import MAX_REQUIREMENTS, PipRequirement
from o_contracts.subjects import Lane
from o_contracts.text_edits import TextEdit


class StartRun(Command):
    """Executor: run the agent on these input messages."""

    run_id: str
    agent_id: str
    # The conversation the run belongs to; None: the agent's default one.
    conversation_id: str | None = None
    # Held to the HTTP API's limits (o_contracts/limits.py), with the same words: a StartRun
    # from another system is validated as a message request is (_bounded below).
    messages: list[ChatMessage] = Field(
        default_factory=list, max_length=limits.MAX_MESSAGES_PER_REQUEST
    )
    # Answers to the agent's pending tool calls (approvals, client tool results).
    approvals: list[ApprovalDecision] = Field(
        default_factory=list, max_length=limits.MAX_LIST_ITEMS
    )
    # Tools the client runs itself: {"name", "description", "parameters"}.
    client_tools: list[dict[str, Any]] = Field(
        default_factory=list, max_length=limits.MAX_CLIENT_TOOLS
    )
    max_steps: int = Field(default=50, ge=1, le=1000)
    stream_tokens: bool = False
    # Recorded on the run (Letta's Run.background and request_config).
    background: bool = False
    request_config: dict[str, Any] = Field(default_factory=dict)
    # Only summarize the agent's context now (POST .../summarize); no LLM step.
    summarize: bool = False
    # With summarize: Letta's compaction_settings.mode. "all" summarizes every
    # message in context; otherwise the last turn stays.
    compaction_mode: Literal["all", "sliding_window"] = "sliding_window"
    # This request's system prompt instead of the agent's, as given (Letta's override_system).
    override_system: str | None = None
    # The conversation's own blocks (events/conversations.py: ConversationCreated).
    isolated_block_ids: list[str] = Field(default_factory=list)
    client_skills: list[ClientSkill] = Field(default_factory=list)
    # Agents whose runs wait for this run's answer (multi-agent tools), nearest first: an
    # agent's runs go one at a time, so this run waiting in turn for one of them would
    # wait forever.
    awaited_by: list[str] = Field(default_factory=list)
    # A sleep-time reflection (o_evolution/turns.py): the run has the memory service
    # reflect on this agent's memories and records what it cost; no step of its own.
    reflect_on: str | None = None
    # Sent by a request to steer a run in flight (concurrency "steer"), before that was
    # decided: if the run took this run's messages (RunSteered names it), this run has
    # nothing left to do and records nothing; otherwise it runs them, so they are never
    # lost.
    steer: bool = False
    # Sent before its sender read the agent (the gateway's first try for an agent it has
    # seen: one read fewer on the run's path). Where a run of the agent is ahead of it, it
    # waits for its turn only if the agent's concurrency default (o_contracts/
    # concurrency.py) queues runs; under another default it is refused at once with
    # nothing recorded and taken out of the commands stream (409, `result` {"concurrency":
    # the policy}), for the sender to decide the run's admission itself. With no run
    # ahead it runs whatever the default (every policy runs a message then).
    enqueue_only: bool = False

    @property
    def lane(self) -> Lane:
        return Lane(self.agent_id, self.conversation_id)

    # A model handle (`provider/model`) to use for this run instead of the agent's, with
    # that model's default settings (Letta's override_model); the agent is unchanged.
    override_model: str | None = Field(default=None, max_length=256)
    # llm_config fields this run uses over its model's (a conversation's model_settings).
    override_settings: dict[str, Any] = Field(default_factory=dict)
    # POST the run's outcome here when it ends, signed (Letta's callback_url;
    # docs/callbacks.md). Recorded on the run; the gateway delivers it.
    callback_url: CallbackUrl | None = None

    @model_validator(mode="after")
    def _has_input(self) -> StartRun:
        if not (self.messages or self.approvals or self.summarize or self.reflect_on):
            raise ValueError("a run needs input messages or approvals")
        return self

    @model_validator(mode="after")
    def _bounded(self) -> StartRun:
        text = sum(limits.utf8_len(m.content or "") for m in self.messages)
        for a in self.approvals:
            text += limits.utf8_len(a.reason or "") + limits.utf8_len(a.tool_return or "")
        too_much = limits.input_over_limit(text)
        if not too_much and self.client_tools:
            too_much = limits.client_tools_over_limit(limits.check_storable(self.client_tools))
        if too_much:
            raise ValueError(too_much)
        return self


class CreateBlock(Command):
    """Memory: create a block (optionally for an agent being created)."""

    block_id: str
    spec: BlockSpec


class UpdateBlock(Command):
    """Memory: change a block's fields through the API (read_only does not apply)."""

    block_id: str
    changes: dict[str, Any]


class EditBlockText(Command):
    """Memory: make a promoted patch's text edits on a block as it is when decided, all or
    none (o_contracts/text_edits.py), so what the agent wrote there since the patch was
    proposed stays. Refused (409) when an edit's anchor is gone; a repeat changes nothing."""

    block_id: str
    edits: list[TextEdit] = Field(min_length=1)


class DeleteBlock(Command):
    block_id: str


class RunMemoryTool(Command):
    """Memory: an agent's memory tool call (memory_insert, core_memory_append, ...).

    Tool failures are answered as `Reply(ok=False, error=...)`, which the
    executor hands to the model as an error tool return.
    """

    agent_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    # Blocks a label names first (the conversation's own), before the agent's.
    isolated_block_ids: list[str] = Field(default_factory=list)


class RunTool(Command):
    """Tool sandbox: run a user's Python tool for an agent, isolated, and record the outcome.

    The source code travels in the command because the sandbox has no database.
    Secrets arrive Fernet-encrypted and are decrypted only inside the sandbox,
    for this run. A sandbox refuses a command past `deadline` (its caller has
    given up), so a late delivery never runs a tool nobody waits for.
    """

    agent_id: str
    run_id: str
    tool_call_id: str
    tool_id: str
    tool_name: str
    source_code: str
    arguments: dict[str, Any]
    encrypted_secrets: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(default=30.0, gt=0, le=600)
    return_char_limit: int = Field(default=50000, ge=1)
    idempotent: bool = False
    deadline: datetime
    # Packages the tool imports (its own and the sandbox configuration's): the sandbox
    # installs each set once and puts it on the tool's path (docs/sandbox.md).
    requirements: list[PipRequirement] = Field(default_factory=list, max_length=MAX_REQUIREMENTS)


class RestoreBlockVersion(Command):
    """Memory: make an earlier version of a block current again (a new BlockUpdated)."""

    block_id: str
    version: int = Field(ge=1)


class InsertPassage(Command):
    """Memory: add a passage to an agent's archival memory.

    Without `importance` the agent's LLM rates it (1-10); without `created_at`
    it is now.
    """

    agent_id: str
    passage_id: str
    text: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    created_at: datetime | None = None
    importance: int | None = Field(default=None, ge=1, le=10)


class DeletePassage(Command):
    agent_id: str
    passage_id: str


class CreateArchive(Command):
    """Memory: make an archive (events/archives.py), keyed by its id."""

    archive_id: str
    name: str = Field(min_length=1, max_length=limits.MAX_NAME_CHARS)
    description: str | None = Field(default=None, max_length=limits.MAX_DESCRIPTION_CHARS)
    # The embedding model handle its passages are embedded with (None: the local model).
    embedding: str | None = Field(default=None, max_length=limits.MAX_NAME_CHARS)


class UpdateArchive(Command):
    """Memory: rename an archive or change its description (absent fields stay)."""

    archive_id: str
    name: str | None = Field(default=None, min_length=1, max_length=limits.MAX_NAME_CHARS)
    description: str | None = Field(default=None, max_length=limits.MAX_DESCRIPTION_CHARS)


class DeleteArchive(Command):
    archive_id: str


class AttachArchive(Command):
    """Memory: the agent's archival memory takes in the archive's passages; what the agent
    writes to archival memory from now goes into the archive (the first one attached)."""

    archive_id: str
    agent_id: str


class DetachArchive(Command):
    archive_id: str
    agent_id: str


class ArchivePassage(BaseModel):
    """One passage of InsertArchivePassages (InsertPassage's fields but the agent's)."""

    model_config = ConfigDict(extra="forbid")

    passage_id: str
    text: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    created_at: datetime | None = None
    importance: int | None = Field(default=None, ge=1, le=10)
    metadata: dict[str, Any] = Field(default_factory=dict)


class InsertArchivePassages(Command):
    """Memory: put passages into an archive, all or none (no agent rates them: without
    `importance` they get the default)."""

    archive_id: str
    passages: list[ArchivePassage] = Field(min_length=1, max_length=limits.MAX_ARCHIVE_BATCH)

    @model_validator(mode="after")
    def _bounded(self) -> InsertArchivePassages:
        # One event carries them all, with a vector each: their text together is held to
        # one text's limit, so the event fits in a NATS message.
        text = sum(limits.utf8_len(p.text) for p in self.passages)
        if text > limits.MAX_TEXT_BYTES:
            raise ValueError(
                f"the passages' text is {text} bytes together;"
                f" at most {limits.MAX_TEXT_BYTES} in one request"
            )
        return self


class DeleteArchivePassage(Command):
    archive_id: str
    passage_id: str


class ReflectOnMemories(Command):
    """Memory: the agent's recent memories passed the importance threshold; reflect."""

    agent_id: str
    # The sleep-time companion's run that asked (None: the memory service's own trigger).
    run_id: str | None = None


class DeliverCallback(Command):
    """Gateway: deliver the completion callback of a run that ended (docs/callbacks.md).

    Sent by the executor when a run with a `callback_url` ends, on
    `o.cmd.callback.<run_id>` under the id `callback_command_id(run_id)` (a run's end
    handled twice sends it once); the handler reads the delivery's state from its
    subject (`o.evt.callback.<run_id>`), so a repeat attempts nothing already
    acknowledged and answers with the recorded outcome.
    """

    run_id: str
    agent_id: str
    # The run's RunCompleted in the log: the read models the body is rendered from
    # must show it first.
    completed_seq: int = Field(ge=1)


def callback_command_id(run_id: str) -> str:
    """The id of a run's DeliverCallback: the same for every sender and every try."""
    return derived_id("cmd", run_id, "callback")
