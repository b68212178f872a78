"""Given an agent and what the log holds, when a StartRun comes, then these events: the agent
loop run in milliseconds, with no servers (the shadow's dependencies and a scripted model).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from o_contracts.base import Event
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.events import (
    RunStarted,
    ToolReturned,
    facts,
)
from o_contracts.models import ApprovalDecision, ChatMessage, ToolCall, Usage
from o_executor.llm import LLMResult
from o_executor.run import AgentConfig, Completed, Refused, RunInputs, run_agent
from o_executor.run.deps import ModelRequest, RunCancelled, ToolOutcome
from o_executor.run_log import RunLog
from o_executor.shadow.deps import ShadowDeps
from o_executor.shadow.snapshot import ArchiveSummary, ConversationFold, Snapshot

AGENT_ID = "agent-00000000-0000-4000-8000-000000000001"
RUN_ID = "run-00000000-0000-4000-8000-000000000002"
HUMAN_BLOCK = {
    "id": "block-00000000-0000-4000-8000-000000000003",
    "label": "human",
    "value": "Name: Sam",
    "limit": 5000,
    "description": None,
    "read_only": False,
    "metadata": {},
    "tags": [],
    "version": 1,
    "last_seq": 1,
}


def agent(
    agent_type: str = "letta_v1_agent",
    tools: Sequence[str] = ("conversation_search", "memory_insert", "archival_memory_search"),
    rules: Sequence[dict[str, Any]] = (),
) -> AgentConfig:
    return AgentConfig(
        id=AGENT_ID,
        name="a",
        system="You are a test agent.",
        agent_type=agent_type,
        llm_config={"handle": "openai/gpt-4o-mini", "context_window": 128000},
        tools=tuple(tools),
        tool_rules=tuple(rules),
    )


@dataclass
class Answer:
    """One scripted model answer: text, or tool calls (name, arguments)."""

    content: str | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # Raise this instead of answering (RunCancelled: cancelled mid-call).
    raises: BaseException | None = None


def say(text: str) -> Answer:
    return Answer(content=text)


def call(name: str, **args: Any) -> Answer:
    return Answer(calls=[(name, args)])


class ScriptedModel:
    def __init__(self, answers: Sequence[Answer]) -> None:
        self.answers = list(answers)
        self.requests: list[ModelRequest] = []
        self.calls = 0

    async def __call__(self, request: ModelRequest) -> LLMResult:
        self.requests.append(request)
        if not self.answers:
            raise AssertionError("the model was asked more often than the scenario expects")
        answer = self.answers.pop(0)
        if answer.raises is not None:
            raise answer.raises
        calls = []
        for name, args in answer.calls:
            self.calls += 1
            calls.append(ToolCall(id=f"call_{self.calls}", name=name, arguments=json.dumps(args)))
        return LLMResult(answer.content, calls, Usage(prompt_tokens=10, completion_tokens=2), None)

    def offered(self, request: int) -> list[str]:
        """The tool names offered in the `request`-th request."""
        return [t["function"]["name"] for t in self.requests[request].tools]


@dataclass
class Then:
    outcome: Completed | Refused
    # The facts the run recorded, one by one (o_contracts.events.facts)...
    events: list[Event]
    model: ScriptedModel
    deps: ShadowDeps
    # ...and the events it appended for them (a run's end may carry its last answer).
    appended: list[Event]

    @property
    def types(self) -> list[str]:
        return [type(e).__name__ for e in self.events]

    @property
    def stop_reason(self) -> str:
        assert isinstance(self.outcome, Completed), self.outcome
        return self.outcome.stop_reason.value

    def returns(self) -> list[ChatMessage]:
        return [e.message for e in self.events if isinstance(e, ToolReturned)]

    def asked_messages(self, request: int) -> list[dict[str, Any]]:
        return self.model.requests[request].messages


class ScenarioDeps(ShadowDeps):
    """The shadow's dependencies, with a cancellation and in-doubt answers a scenario sets."""

    cancel_now = False
    in_doubt: Callable[[ToolCall], ToolOutcome | None] = staticmethod(lambda call: None)

    def cancelled(self) -> bool:
        return self.cancel_now

    async def resolve_in_doubt(self, call: ToolCall, requested_seq: int) -> ToolOutcome | None:
        return self.in_doubt(call)


async def other_tools(call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(True, f"{call.name} ran with {json.dumps(args, sort_keys=True)}")


async def when(
    given: AgentConfig,
    answers: Sequence[Answer],
    *,
    text: str = "hi",
    history: Sequence[ChatMessage] = (),
    recorded: Sequence[Event] = (),
    max_steps: int = 10,
    approvals: Sequence[ApprovalDecision] = (),
    client_tools: Sequence[dict[str, Any]] = (),
    cancelled: bool = False,
    in_doubt: Callable[[ToolCall], ToolOutcome | None] | None = None,
) -> Then:
    """Run a StartRun with `text` on `given` (its history, this run's `recorded` events)."""
    conversation = ConversationFold()
    for i, message in enumerate(history):
        conversation.messages[message.id] = (i, message, "run-earlier")
        conversation.seen[message.id] = i
    snapshot = Snapshot(0, given, [dict(HUMAN_BLOCK)], conversation, ArchiveSummary())
    messages = [ChatMessage(id=f"message-in-{RUN_ID}", role="user", content=text)] if text else []
    command = Envelope.wrap(
        StartRun(
            run_id=RUN_ID,
            agent_id=AGENT_ID,
            messages=messages,
            max_steps=max_steps,
            approvals=list(approvals),
            client_tools=list(client_tools),
        ),
        aggregate_id=AGENT_ID,
        producer="test",
    )
    model = ScriptedModel(answers)
    deps = ScenarioDeps(snapshot, command, model, other_tools)
    deps.cancel_now = cancelled
    if in_doubt is not None:
        deps.in_doubt = in_doubt  # type: ignore[method-assign]
    log = run_log(recorded)
    inputs = RunInputs(command, given, list(history), log, known=bool(recorded))
    outcome = await run_agent(inputs, deps)
    appended = [e.data for e in deps.overlay.events]
    return Then(outcome, [f for e in appended for f in facts(e)], model, deps, appended)


def run_log(events: Sequence[Event]) -> RunLog:
    """What RunLog.read would collect from these events of the run."""
    log = RunLog()
    for seq, event in enumerate(events, start=1):
        for fact in facts(event):
            log.add(fact, seq)
    return log


def started() -> RunStarted:
    """The run's RunStarted, as the log holds it for a resumed run."""
    return RunStarted(
        run_id=RUN_ID,
        agent_id=AGENT_ID,
        messages=[ChatMessage(id=f"message-in-{RUN_ID}", role="user", content="hi")],
        max_steps=10,
    )


def cancelled_mid_call() -> Answer:
    return Answer(raises=RunCancelled(RUN_ID))
