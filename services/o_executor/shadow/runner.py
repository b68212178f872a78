"""Running the agent loop in the shadow: on a snapshot from the log, writes kept in an
overlay, nothing published. `replay` runs a recorded run again against the snapshot taken
just before it started, with the model's recorded answers: the way to prove the shadow
runs the same loop as the live system (tests/e2e/test_shadow.py), and the basis
of trying a changed agent on real traffic (self-evolution)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from o_contracts import subjects
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope, decode
from o_contracts.events import (
    ContextSummarized,
    LLMResponded,
    RunStarted,
    RunSteered,
    ToolReturned,
    facts,
)
from o_contracts.models import ChatMessage, ToolCall, Usage
from o_executor.llm import LLMResult
from o_executor.run import Completed, Refused, RunInputs, run_agent
from o_executor.run.deps import ModelRequest, ToolOutcome
from o_executor.run.summarize import SUMMARIZER_PROMPT, SUMMARY_PREFIX
from o_executor.run_log import RunLog
from o_executor.shadow.deps import Model, OtherTools, Overlay, ShadowDeps, not_run
from o_executor.shadow.snapshot import Snapshot, take_snapshot
from o_runtime.eventlog import EventLog


@dataclass(frozen=True)
class ShadowResult:
    outcome: Completed | Refused
    overlay: Overlay
    # The agent's blocks as the run left them (in the overlay).
    blocks: list[dict[str, Any]]

    @property
    def messages(self) -> list[ChatMessage]:
        """The run's messages, in the order its events recorded them."""
        return run_messages([e.data for e in self.overlay.events])


def run_messages(events: list[Any]) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for event in (fact for e in events for fact in facts(e)):
        if isinstance(event, RunStarted):
            out += event.messages
        elif isinstance(event, LLMResponded | ToolReturned):
            out.append(event.message)
        elif isinstance(event, ContextSummarized):
            out.append(event.summary)
        elif isinstance(event, RunSteered):
            out += event.messages
    return out


async def shadow_run(
    snapshot: Snapshot,
    command: Envelope[StartRun],
    model: Model,
    other_tools: OtherTools = not_run,
    steered: list[RunSteered] | None = None,
) -> ShadowResult:
    """Run `command` on `snapshot`; nothing leaves the run but its result. `steered`: what
    a recorded run took while it ran (a replay takes it at the same steps)."""
    deps = ShadowDeps(snapshot, command, model, other_tools)
    recorded = RunLog(steered={s.step_number: s for s in steered or []})
    history = snapshot.history(exclude_run=command.data.run_id)
    inputs = RunInputs(command, snapshot.agent, history, recorded)
    outcome = await run_agent(inputs, deps)
    return ShadowResult(outcome, deps.overlay, deps.blocks)


class RecordedModel:
    """The model's answers as a run recorded them, in order (and its summaries, if any)."""

    def __init__(self, answers: list[LLMResponded], summaries: list[ContextSummarized]) -> None:
        self.answers = list(answers)
        self.summaries = list(summaries)

    async def __call__(self, request: ModelRequest) -> LLMResult:
        if request.messages and request.messages[0].get("content") == SUMMARIZER_PROMPT:
            summary = self.summaries.pop(0).summary.content or ""
            return LLMResult(summary.removeprefix(SUMMARY_PREFIX), [], Usage(), "stop")
        if not self.answers:
            raise LookupError("the model is asked more often than the recorded run asked it")
        answer = self.answers.pop(0)
        message = answer.message
        return LLMResult(
            message.content, list(message.tool_calls), answer.usage, answer.finish_reason
        )


class RecordedTools:
    """Tool results as the run recorded them, by call id (for calls with effects)."""

    def __init__(self, returns: list[ToolReturned]) -> None:
        self.by_call = {r.message.tool_call_id: r.message for r in returns}

    async def __call__(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        found = self.by_call.get(call.id)
        if found is None:
            return await not_run(call, args)
        return ToolOutcome(
            found.status == "success", found.content or "", stdout=found.stdout, stderr=found.stderr
        )


@dataclass(frozen=True)
class RecordedRun:
    command: Envelope[StartRun]
    started_seq: int
    events: list[Any]

    @property
    def messages(self) -> list[ChatMessage]:
        return run_messages(self.events)


async def read_run(
    eventlog: EventLog,
    agent_id: str,
    run_id: str,
    conversation_id: str | None = None,
    since: int = 1,
) -> RecordedRun:
    """A run as the log holds it (on its conversation's subject): its StartRun (rebuilt
    from RunStarted) and its events. `since`: where to start reading (the run's
    RunStarted position, when known: reading a long history from its start costs
    time per case)."""
    events: list[Any] = []
    started: tuple[int, Envelope[Any]] | None = None
    subject = subjects.Lane(agent_id, conversation_id).events
    async for raw in eventlog.replay(subject, start_seq=since):
        envelope = decode(raw.data)
        if getattr(envelope.data, "run_id", None) != run_id:
            continue
        if isinstance(envelope.data, RunStarted):
            started = (raw.seq, envelope)
        if started is not None:
            # (A run's end with its last answer is read as the two facts it records.)
            events += facts(envelope.data)
    if started is None:
        raise LookupError(f"run {run_id} has no RunStarted in the log")
    seq, envelope = started
    start = envelope.data
    assert isinstance(start, RunStarted)
    command = Envelope.wrap(
        StartRun(
            run_id=run_id,
            agent_id=agent_id,
            conversation_id=conversation_id,
            messages=start.messages,
            max_steps=start.max_steps,
            approvals=start.approvals,
            background=start.background,
            request_config=start.request_config,
            override_model=start.override_model,
            override_settings=start.override_settings,
            # (So a replay records the same RunStarted; the shadow delivers nothing.)
            callback_url=start.callback_url,
        ),
        aggregate_id=agent_id,
        producer="shadow",
        id=envelope.causation_id,
        correlation_id=envelope.correlation_id,
    )
    return RecordedRun(command, seq, events)


async def replay(
    eventlog: EventLog, agent_id: str, run_id: str, conversation_id: str | None = None
) -> tuple[RecordedRun, ShadowResult]:
    """Run a recorded run again in the shadow, on the agent (in its conversation) as it
    was just before it started, with the model's and the effectful tools' recorded answers."""
    recorded = await read_run(eventlog, agent_id, run_id, conversation_id)
    snapshot = await take_snapshot(eventlog, agent_id, recorded.started_seq - 1, conversation_id)
    model = RecordedModel(
        [e for e in recorded.events if isinstance(e, LLMResponded)],
        [e for e in recorded.events if isinstance(e, ContextSummarized)],
    )
    tools = RecordedTools([e for e in recorded.events if isinstance(e, ToolReturned)])
    steered = [e for e in recorded.events if isinstance(e, RunSteered)]
    return recorded, await shadow_run(snapshot, recorded.command, model, tools, steered)
