"""A run from start to completion: its start recorded, its steps (or a forced summary), its
completion recorded. What a delivery of StartRun does once its inputs are read (live:
o_executor/live/execution.py; shadow: o_executor/shadow/runner.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from o_contracts import approval_rules
from o_contracts.approval_rules import ApprovalRefusal
from o_contracts.events import ContextSummarized, RunCompleted, RunStarted
from o_contracts.ids import derived_id
from o_contracts.models import ChatMessage
from o_executor import llm
from o_executor.providers import Handle, UnknownProvider
from o_executor.run.context import Run
from o_executor.run.deps import AgentGone, RunDeps
from o_executor.run.state import RunInputs
from o_executor.run.steps import run_steps
from o_executor.run.stop import Stopped, StopReason
from o_executor.run.summarize import summarize
from o_runtime.eventlog import EventTooLarge
from o_runtime.llm_providers import ProviderNotConfigured


@dataclass(frozen=True)
class Completed:
    """The run ended; its RunCompleted is at `seq`."""

    stop_reason: StopReason
    seq: int
    # A forced summary's outcome (POST .../summarize answers with it).
    summary: ContextSummarized | None = None


@dataclass(frozen=True)
class Refused:
    """Nothing of the run could be recorded, the agent never existed, or its input was
    refused: the caller is told."""

    status: int
    error: str
    # The HTTP API's `detail` where it is more than `error` (an object).
    detail: dict[str, Any] | None = None
    # Where the end of a run the log knew is recorded (its refusal ended it).
    seq: int | None = None


async def run_agent(inputs: RunInputs, deps: RunDeps) -> Completed | Refused:
    if inputs.recorded.started is None:
        inputs = _answers_repeated(inputs)
    run = Run(inputs, deps)
    cmd = run.cmd
    try:
        if inputs.recorded.started is None:
            refused = _refused_input(inputs)
            if refused is not None:
                return await _refuse(run, refused, inputs.known)
            # Recorded while the first LLM call runs (every later record waits for
            # it): a crash before it lands leaves nothing, so the run starts afresh.
            deps.start(
                RunStarted(
                    run_id=cmd.run_id,
                    agent_id=cmd.agent_id,
                    conversation_id=cmd.conversation_id,
                    messages=cmd.messages,
                    max_steps=cmd.max_steps,
                    approvals=cmd.approvals,
                    background=cmd.background,
                    request_config=cmd.request_config,
                    override_model=cmd.override_model,
                    override_settings=cmd.override_settings,
                    version=inputs.agent.served,
                    callback_url=cmd.callback_url,
                )
            )
        messages = inputs.history + list(cmd.messages)
        run.state.run_start = len(inputs.history)
        try:
            if cmd.summarize:
                stopped = await forced_summary(run, messages)
            elif cmd.reflect_on is not None:
                stopped = await reflection(run, cmd.reflect_on)
            else:
                stopped = await run_steps(run, messages)
            await deps.started()
        except EventTooLarge as exc:
            # A fact too large for the log (an input sent over NATS, a model's
            # answer) ends the run with the reason; if not even its start could
            # be recorded, nothing was, and the caller is told.
            if not (inputs.known or inputs.recorded.started or await _start_recorded(deps)):
                return Refused(exc.status, exc.reason)
            stopped = Stopped(StopReason.ERROR, exc.reason)
        seq, stopped = await _record_end(run, stopped)
    except AgentGone:
        known = inputs.known or inputs.recorded.started is not None
        return await agent_gone(run, known or await _start_recorded(deps))
    return Completed(stopped.reason, seq, run.state.summary)


def _answers_repeated(inputs: RunInputs) -> RunInputs:
    """A run whose answers the conversation already has (a sender retrying after a lost
    turn) goes on with its messages alone, or a keep-alive message, as Letta's loop does
    (the gateway does the same to a request before it sends it)."""
    cmd = inputs.cmd
    answered = [a.tool_call_id for a in cmd.approvals]
    recent = (m.tool_call_id for m in inputs.history[-approval_rules.RECENT_MESSAGES :])
    if not approval_rules.answered_already(
        answered, approval_rules.pending_in(inputs.history), recent
    ):
        return inputs
    keep_alive = ChatMessage(
        id=derived_id("message", cmd.run_id, "keep-alive"),
        role="user",
        content=approval_rules.KEEP_ALIVE,
    )
    taken = cmd.model_copy(update={"approvals": [], "messages": cmd.messages or [keep_alive]})
    return replace(inputs, command=inputs.command.model_copy(update={"data": taken}))


def _refused_input(inputs: RunInputs) -> ApprovalRefusal | None:
    """Why the run's input may not go to the agent as its conversation stands (Letta's
    approval rules, whoever sent the command); None: it may. A forced summary or a
    reflection sends no input."""
    cmd = inputs.cmd
    if cmd.summarize or cmd.reflect_on is not None:
        return None
    return approval_rules.refusal(
        [a.tool_call_id for a in cmd.approvals],
        approval_rules.pending_in(inputs.history),
        sends_messages=bool(cmd.messages),
    )


async def _refuse(run: Run, refused: ApprovalRefusal, known: bool) -> Refused:
    """Nothing of a refused run is recorded; but a run the log knew (queued by a decision
    on its conversation) is ended, so that it never stays created."""
    detail = refused.detail if isinstance(refused.detail, dict) else None
    seq = None
    if known:
        seq = await run.deps.record(
            RunCompleted(
                run_id=run.run_id,
                agent_id=run.agent_id,
                stop_reason=StopReason.ERROR.value,
                usage=run.state.usage,
                step_count=0,
                error=refused.message,
            ),
            "completed",
        )
    return Refused(refused.status, refused.message, detail, seq)


async def _record_end(run: Run, stopped: Stopped) -> tuple[int, Stopped]:
    """The run's RunCompleted, with the answer that ended it when there is one; where it
    is, and why the run ended as recorded."""
    state, cmd = run.state, run.cmd
    answer, state.final_answer = state.final_answer, None
    ended = RunCompleted(
        run_id=cmd.run_id,
        agent_id=cmd.agent_id,
        stop_reason=stopped.reason.value,
        usage=state.usage,
        step_count=state.steps,
        error=stopped.error,
        answer=answer,
    )
    if answer is not None:
        try:
            return await run.deps.record(ended, "completed"), stopped
        except EventTooLarge:
            pass
        # Together too large for one message: the answer alone first, as a step's answer
        # was always recorded (too large on its own: the run ends in error without it).
        ended = ended.model_copy(update={"answer": None})
        try:
            await run.deps.record(answer, f"llm-{answer.step_number}")
        except EventTooLarge as exc:
            stopped = Stopped(StopReason.ERROR, exc.reason)
            ended = ended.model_copy(
                update={"stop_reason": stopped.reason.value, "error": stopped.error}
            )
    return await run.deps.record(ended, "completed"), stopped


async def _start_recorded(deps: RunDeps) -> bool:
    try:
        return await deps.started()
    except (AgentGone, EventTooLarge):
        return False


async def agent_gone(run: Run, known: bool) -> Completed | Refused:
    """The agent was deleted before or during the run: the run ends, cancelled.

    A run the log knows (queued or started) gets its RunCompleted, so it never
    stays `created` or `running`; one it never heard of is a 404.
    """
    if not known:
        return Refused(404, f"agent {run.agent_id} not found")
    seq = await run.deps.record(
        RunCompleted(
            run_id=run.run_id,
            agent_id=run.agent_id,
            stop_reason=StopReason.CANCELLED.value,
            usage=run.state.usage,
            step_count=run.state.steps,
            error=f"agent {run.agent_id} was deleted",
        ),
        "completed",
        even_if_gone=True,
    )
    return Completed(StopReason.CANCELLED, seq)


async def reflection(run: Run, agent_id: str) -> Stopped:
    """A sleep-time reflection on `agent_id`'s memories: the run is its record and its cost."""
    run.state.steps = 0
    outcome = await run.deps.reflect(agent_id)
    run.state.usage = run.state.usage + outcome.usage
    if not outcome.ok:
        return Stopped(StopReason.ERROR, outcome.error)
    return Stopped(StopReason.END_TURN)


async def forced_summary(run: Run, messages: list[ChatMessage]) -> Stopped:
    """POST .../summarize: summarize everything before the last turn, now."""
    run.state.steps = 0
    done = run.inputs.recorded.summaries.get(-1)
    if done is None:
        try:
            model = run.model
            handle = Handle.parse(model.handle)
            if run.cmd.compaction_mode == "all":
                run.state.run_start = len(messages)
            else:
                run.state.run_start = max(
                    (i for i, m in enumerate(messages) if m.role == "user"), default=0
                )
            done = await summarize(
                run,
                handle,
                messages,
                -1,
                model.window,
                force=True,
                everything=run.cmd.compaction_mode == "all",
            )
        except (llm.LLMError, UnknownProvider, ProviderNotConfigured) as exc:
            return Stopped(StopReason.LLM_API_ERROR, str(exc))
    run.state.summary = done
    return Stopped(StopReason.END_TURN)
