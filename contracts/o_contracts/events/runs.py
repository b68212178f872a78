"""Agent run events, appended by the executor on `o.evt.agent.<agent_id>`.

A run is a chain of recorded facts. The LLM's response and each tool's result
are recorded before they are acted on, so a resumed run never asks again.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from o_contracts.base import Event, Message
from o_contracts.callback_urls import CallbackUrl
from o_contracts.evolution import ServedVersion
from o_contracts.models import ApprovalDecision, ChatMessage, Usage


class RunQueued(Event):
    """A run was accepted and waits for its turn (appended by the gateway for async runs)."""

    run_id: str
    agent_id: str
    background: bool = False
    request_config: dict[str, Any] = Field(default_factory=dict)
    # The conversation it belongs to (None: the agent's default one).
    conversation_id: str | None = None
    # Runs of the conversation this one interrupts (Letta-style cancellation: each stops
    # at its next safe point, `cancelled`), decided with its admission (concurrency
    # `interrupt` or `rollback`); with `rollback` their messages also leave the context
    # once they have stopped (RunRolledBack).
    interrupts: list[str] = Field(default_factory=list)
    rollback: bool = False
    # Where the run's outcome is POSTed when it ends (Letta's callback_url; docs/callbacks.md).
    callback_url: CallbackUrl | None = None


class RunStarted(Event):
    run_id: str
    agent_id: str
    conversation_id: str | None = None
    # The accepted input: user (or system) messages that open this run.
    messages: list[ChatMessage]
    max_steps: int
    # The answers this run opens with, to the previous run's pending tool calls.
    approvals: list[ApprovalDecision] = Field(default_factory=list)
    background: bool = False
    request_config: dict[str, Any] = Field(default_factory=dict)
    # The model this run uses instead of the agent's (StartRun.override_model).
    override_model: str | None = None
    # (StartRun.override_settings)
    override_settings: dict[str, Any] = Field(default_factory=dict)
    # The arm of an evolution canary this run took (None: no canary was running).
    version: ServedVersion | None = None
    # (StartRun.callback_url: a run started over NATS with no RunQueued before it.)
    callback_url: CallbackUrl | None = None


class RunCancellationRequested(Event):
    """Someone asked to stop the run; the executor stops at its next step boundary."""

    run_id: str
    agent_id: str


class LLMResponded(Event):
    run_id: str
    agent_id: str
    step_id: str
    step_number: int
    message: ChatMessage
    usage: Usage
    model: str
    finish_reason: str | None = None
    # When the step began (its prompt compiled), when the model was asked, and how long
    # it took to answer: wall-clock nanoseconds since the epoch and a duration (Letta's
    # step metrics; None in events recorded before they were kept).
    step_start_ns: int | None = None
    llm_request_start_ns: int | None = None
    llm_request_ns: int | None = None


class StepFeedbackGiven(Event):
    """Someone rated a step of a run (Letta's `PATCH /v1/steps/{step_id}/feedback`).

    Appended by the gateway on the run's subject, after the step's `LLMResponded`.
    The latest one for a step is what the step shows: feedback set again replaces it.
    """

    run_id: str
    agent_id: str
    step_id: str
    # None: the step has no feedback any more (Letta sets what the request says).
    feedback: Literal["positive", "negative"] | None = None
    # The step's tags from now on; None leaves them as they were (Letta replaces
    # them only when the request names some).
    tags: list[str] | None = None


class ToolCallRequested(Event):
    """The executor is about to run a tool call that changes something outside the run.

    Recorded before the tool runs, so a resumed run that finds this without a
    `ToolReturned` knows the call may have had its effect, and finds out from
    the log instead of running it again.
    """

    run_id: str
    agent_id: str
    step_id: str
    tool_call_id: str
    tool_name: str
    # The command that carries the call to the service that runs it, if any.
    command_id: str | None = None


class ToolReturned(Event):
    run_id: str
    agent_id: str
    step_id: str
    message: ChatMessage


class ContextSummarized(Event):
    """Older messages left the context window; a summary (written by the LLM) took their place.

    The evicted messages stay in the history (recall) and remain searchable.

    Version 2: what left is every message in context before
    `first_kept_message_id` (`evicted_count` of them), not a list of their ids:
    the list grew with the context (a wide window of short messages made it
    larger than a NATS message may be, and every later run of the agent
    failed). `evicted_message_ids` is read from version 1 events only.
    """

    schema_version: ClassVar[int] = 2

    run_id: str
    agent_id: str
    # The step before whose LLM call this happened (-1: a forced summarize).
    step_number: int
    summary: ChatMessage
    # The summary is placed right before this message in the context; every
    # message in context before it left. None: every message left (Letta's
    # compaction mode "all"); the summary follows them.
    first_kept_message_id: str | None
    messages_before: int
    messages_after: int
    evicted_count: int | None = None
    # Version 1: the ids of the messages that left.
    evicted_message_ids: list[str] = Field(default_factory=list)


class RunCompleted(Event):
    run_id: str
    agent_id: str
    stop_reason: str
    usage: Usage = Field(default_factory=Usage)
    step_count: int = 0
    error: str | None = None
    # The model's answer that ended the run, recorded here instead of as an LLMResponded
    # of its own just before: one append, one delivery to every follower of the subject
    # and one projection commit fewer a run (bench/README.md, "One event for a final
    # answer and the run's end"). None: the run's last answer, if any, is an LLMResponded
    # of its own (a run that ended after tools ran, an error, a cancellation; every run
    # recorded before answers rode here). Read the two as one fact after the other:
    # `facts` below.
    answer: LLMResponded | None = None


def facts(event: Message) -> tuple[Message, ...]:
    """What `event` records, one fact at a time, in the order they happened: a
    RunCompleted that carries its run's last answer is that LLMResponded, then the run's
    end (without it); any other event is itself. Readers that act on LLMResponded read
    the log through this, so the final answer's two forms read alike."""
    if isinstance(event, RunCompleted) and event.answer is not None:
        return (event.answer, event.model_copy(update={"answer": None}))
    return (event,)
