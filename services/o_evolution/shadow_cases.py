"""One recorded run tried again in the shadow under a version (issue 14 point 3).

The run is replayed from a snapshot of the agent as the log had it just before the run
started, with the version's configuration and evolvable blocks in place of the agent's,
asking the live model. Nothing leaves the shadow (o_executor/shadow): memory writes go to
an overlay thrown away with it, no event, message or projection is written, no tool with
effects runs. A tool call identical (name and arguments) to one the recorded run made is
answered with the recorded result; any other call to a tool outside the loop's own
(memory tools, which the overlay handles) is not run, and makes the case inconclusive.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any

from o_contracts.base_tools import EVOLUTION_TOOLS
from o_contracts.events import LLMResponded, ToolReturned, facts
from o_contracts.evolution import VersionSpec
from o_contracts.experiments import ArmResult, CaseResult
from o_contracts.models import ChatMessage, ToolCall
from o_executor import llm
from o_executor.run import Completed, versions
from o_executor.run.deps import ModelRequest, ToolOutcome
from o_executor.shadow.deps import Model
from o_executor.shadow.runner import RecordedRun, shadow_run
from o_executor.shadow.snapshot import Snapshot


def with_version(snapshot: Snapshot, spec: VersionSpec) -> Snapshot:
    """The snapshot's agent with the version's configuration and evolvable blocks."""
    blocks = [
        b | {"value": spec.blocks[b["label"]]} if b["label"] in spec.blocks else b
        for b in snapshot.blocks
    ]
    return dataclasses.replace(
        snapshot, agent=versions.with_version(snapshot.agent, spec), blocks=blocks
    )


def with_evolution_tools(snapshot: Snapshot, recorded: RecordedRun) -> Snapshot:
    """The agent with its evolution tools if the recorded run called one (they are given
    at run time, not kept in the log): in the shadow such a call reaches MatchedTools,
    which never runs it, and the case says "not executed in shadow"."""
    called = {
        call.name
        for event in recorded.events
        if isinstance(event, LLMResponded)
        for call in event.message.tool_calls
    }
    if not called & set(EVOLUTION_TOOLS):
        return snapshot
    agent = snapshot.agent
    granted = dataclasses.replace(
        agent,
        tools=tuple(t for t in agent.tools if t not in EVOLUTION_TOOLS) + EVOLUTION_TOOLS,
        evolution_target=agent.id,
    )
    return dataclasses.replace(snapshot, agent=granted)


def _call_key(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        return f"{name}\x00{arguments}"
    if isinstance(args, dict):
        args.pop("request_heartbeat", None)
    return f"{name}\x00{json.dumps(args, sort_keys=True)}"


class MatchedTools:
    """Recorded results for identical calls; anything else is not run, and says so."""

    def __init__(self, recorded: RecordedRun) -> None:
        calls: dict[str, str] = {}
        for event in recorded.events:
            if isinstance(event, LLMResponded):
                for call in event.message.tool_calls:
                    calls[call.id] = _call_key(call.name, call.arguments)
        self.results: dict[str, ChatMessage] = {}
        for event in recorded.events:
            if isinstance(event, ToolReturned) and event.message.tool_call_id in calls:
                self.results.setdefault(calls[event.message.tool_call_id], event.message)
        self.not_run: list[str] = []

    async def __call__(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        # Evolution's own tools never act in the shadow, even as a recorded answer.
        found = (
            None
            if call.name in EVOLUTION_TOOLS
            else self.results.get(_call_key(call.name, json.dumps(args)))
        )
        if found is None:
            self.not_run.append(call.name)
            return ToolOutcome(False, f"'{call.name}' was not executed in shadow")
        return ToolOutcome(found.status == "success", found.content or "")


class TokenLimitExceeded(Exception):
    pass


class MeteredModel:
    """A model that counts the tokens a shadow case spends and stops it past its limit."""

    def __init__(self, model: Model, limit: int) -> None:
        self.model = model
        self.limit = limit
        self.spent = 0

    async def __call__(self, request: ModelRequest) -> llm.LLMResult:
        if self.spent >= self.limit:
            raise TokenLimitExceeded(f"the case spent {self.spent} tokens (limit {self.limit})")
        result = await self.model(request)
        self.spent += result.usage.total_tokens
        return result


def over_limit(case_id: str, conversation_id: str | None, reason: str) -> CaseResult:
    """A case stopped by a limit of its shadow instance: inconclusive, never a win."""
    stopped = ArmResult(answer="", stop_reason="limit", inconclusive=reason)
    return CaseResult(
        case_id=case_id,
        conversation_id=conversation_id,
        parent=stopped,
        candidate=stopped,
        outcome="inconclusive",
        veto=reason,
    )


def live_model(retries: llm.Retries) -> Model:
    async def ask(request: ModelRequest) -> llm.LLMResult:
        return await llm.complete(
            request.handle,
            request.messages,
            request.tools,
            force_tool=request.force_tool,
            settings=request.settings,
            retries=retries,
        )

    return ask


def answer_text(messages: list[ChatMessage]) -> str:
    """What the user would have seen: the assistant's words, send_message's included."""
    said: list[str] = []
    for message in messages:
        if message.role != "assistant":
            continue
        if message.content:
            said.append(message.content)
        for call in message.tool_calls:
            if call.name == "send_message":
                try:
                    said.append(str(json.loads(call.arguments).get("message", "")))
                except (ValueError, AttributeError):
                    continue
    return "\n".join(s for s in said if s)


@dataclass(frozen=True)
class Arm:
    result: ArmResult
    llm_calls: int


async def run_arm(
    snapshot: Snapshot, recorded: RecordedRun, spec: VersionSpec, model: Model
) -> Arm:
    """The recorded run's input, answered by the agent at `spec`, in the shadow."""
    tools = MatchedTools(recorded)
    started = time.perf_counter()
    versioned = with_evolution_tools(with_version(snapshot, spec), recorded)
    result = await shadow_run(versioned, recorded.command, model, tools)
    latency = (time.perf_counter() - started) * 1000
    events = [fact for e in result.overlay.events for fact in facts(e.data)]
    answers = [e for e in events if isinstance(e, LLMResponded)]
    returns = [e for e in events if isinstance(e, ToolReturned)]
    outcome = result.outcome
    stop = outcome.stop_reason.value if isinstance(outcome, Completed) else "error"
    used = [c.name for a in answers for c in a.message.tool_calls]
    new = result.messages[len(recorded.command.data.messages) :]
    return Arm(
        ArmResult(
            answer=answer_text(new),
            stop_reason=stop,
            tool_errors=sum(1 for r in returns if r.message.status == "error"),
            steps=len(answers),
            tokens=sum(a.usage.total_tokens for a in answers),
            latency_ms=round(latency, 3),
            tools_used=used,
            inconclusive=(
                f"tool '{tools.not_run[0]}' not executed in shadow" if tools.not_run else None
            ),
        ),
        llm_calls=len(answers),
    )
