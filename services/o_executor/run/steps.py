"""The steps of a run: ask the model, run its tool calls, and go on while the rules say so.

A step the log already holds (answered before a crash) is not asked again;
its recorded answer is used. An answer that ends the run is recorded with the run's
end (RunCompleted.answer), any other before its tool calls run. Cancellation is
honoured between steps, so every tool call in the history has its result.
"""

from __future__ import annotations

import logging

from o_contracts.events import LLMResponded
from o_contracts.models import ChatMessage
from o_contracts.tool_rules import ToolRuleSolver
from o_executor import llm
from o_executor.providers import Handle, UnknownProvider
from o_executor.run import policy, steering
from o_executor.run.approvals import answer_approvals
from o_executor.run.context import Run
from o_executor.run.deps import RunCancelled
from o_executor.run.model_call import ContextOverflow, ask_model
from o_executor.run.stop import Stopped, StopReason
from o_executor.run.summarize import apply_summary
from o_executor.run.timing import StepClock
from o_executor.run.tool_step import refuse, tool_step
from o_runtime.llm_providers import ProviderNotConfigured

log = logging.getLogger(__name__)


async def run_steps(run: Run, messages: list[ChatMessage]) -> Stopped:
    """Take steps until the turn ends; `messages` grows with the run's messages."""
    clock = StepClock()
    try:
        return await _take_steps(run, messages, clock)
    finally:
        clock.stop()


async def _take_steps(run: Run, messages: list[ChatMessage], clock: StepClock) -> Stopped:
    state, agent, cmd = run.state, run.agent, run.cmd
    try:
        handle = Handle.parse(run.model.handle)
    except (UnknownProvider, ProviderNotConfigured) as exc:
        return Stopped(StopReason.ERROR, str(exc))
    state.rules = ToolRuleSolver([dict(r) for r in agent.tool_rules])
    state.client_tools = policy.client_tool_specs(cmd.client_tools)
    if cmd.approvals:
        messages += await answer_approvals(run, messages)
    available = agent.available
    recorded = run.inputs.recorded
    last_output: str | None = None
    for step in range(cmd.max_steps):
        clock.next()
        final = step == cmd.max_steps - 1
        state.steps = step + 1
        step_id = run.step_id(step)
        allowed = state.rules.allowed(available, last_output)
        done = recorded.steps.get(step)
        summarized = recorded.summaries.get(step)
        if summarized is not None:
            apply_summary(state, messages, summarized)
        if done is None and run.deps.cancelled():
            state.steps = step
            return Stopped(StopReason.CANCELLED)
        # Messages sent to steer the run join it here, before the model is asked.
        await steering.before_model_call(run, step, messages, asking=done is None)
        answered: LLMResponded | None = None
        if done is not None:
            # Answered before a crash: never ask the LLM again.
            reply = done.message
            state.usage = state.usage + done.usage
        else:
            tools = policy.tool_schemas(agent, allowed, state.client_tools)
            clock.asked(handle)
            try:
                answered = await ask_model(
                    run, handle, tools, messages, step, step_id, state.rules.forces_tool_call()
                )
            except RunCancelled:
                state.steps = step
                return Stopped(StopReason.CANCELLED)
            except (llm.LLMError, UnknownProvider) as exc:
                log.warning("run %s: LLM call failed: %s", run.run_id, exc)
                return Stopped(StopReason.LLM_API_ERROR, str(exc))
            except ContextOverflow as exc:
                return Stopped(StopReason.CONTEXT_OVERFLOW, str(exc))
            reply = answered.message
        messages.append(reply)
        after_answer = policy.after_answer(reply, state.rules, available, final)
        if answered is not None:
            if isinstance(after_answer, policy.AwaitApproval | policy.Stop):
                # The answer ends the run: it is recorded with the run's end, in its
                # RunCompleted (one append fewer; o_contracts/events/runs.py).
                state.final_answer = answered
            else:
                # Recorded before any of its tool calls runs: a resumed run never asks
                # the model again for what it acted on.
                await run.record(answered, f"llm-{step}")
        if isinstance(after_answer, policy.AwaitApproval):
            return Stopped(StopReason.REQUIRES_APPROVAL)
        if isinstance(after_answer, policy.Stop):
            return Stopped(after_answer.reason)
        if isinstance(after_answer, policy.Continue):
            if after_answer.nudge:
                messages.append(policy.nudge(run.run_id, step, after_answer.nudge))
            continue
        done_calls = policy.CallsDone()
        for call in reply.tool_calls:
            if call.name in available and call.name not in allowed:
                messages.append(await refuse(run, call, step, step_id, allowed))
                done_calls.another_step = True
                continue
            tool_msg, ends_turn = await tool_step(run, call, step, step_id)
            messages.append(tool_msg)
            if call.name in available:
                state.rules.record(call.name)
            last_output = tool_msg.content
            done_calls.ends_turn = done_calls.ends_turn or ends_turn
            done_calls.terminal = done_calls.terminal or state.rules.is_terminal(call.name)
            done_calls.another_step = done_calls.another_step or policy.asks_another_step(
                call, tool_msg, state.rules
            )
        after_calls = policy.after_calls(
            done_calls, state.rules, available, final, agent.heartbeats
        )
        if isinstance(after_calls, policy.Stop):
            return Stopped(after_calls.reason)
        if after_calls.nudge:
            messages.append(policy.nudge(run.run_id, step, after_calls.nudge))
    return Stopped(StopReason.MAX_STEPS)
