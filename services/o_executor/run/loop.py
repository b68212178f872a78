"""A run from start to completion: its start recorded, its steps (or a forced summary), its
completion recorded. What a delivery of StartRun does once its inputs are read (live:
o_executor/live/execution.py; shadow: o_executor/shadow/runner.py)."""

from __future__ import annotations

from dataclasses import dataclass

from o_contracts.events import ContextSummarized, RunCompleted, RunStarted
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
    """Nothing of the run could be recorded (or the agent never existed): the caller is told."""

    status: int
    error: str


async def run_agent(inputs: RunInputs, deps: RunDeps) -> Completed | Refused:
    run = Run(inputs, deps)
    cmd = run.cmd
    try:
        if inputs.recorded.started is None:
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
