"""Answers to the previous turn's pending tool calls, carried out at the start of a run."""

from __future__ import annotations

from typing import Literal

from o_contracts.models import ChatMessage
from o_executor.run.context import Run
from o_executor.run.tool_step import record_return, tool_step


async def answer_approvals(run: Run, history: list[ChatMessage]) -> list[ChatMessage]:
    """Carry out the answers to the last turn's pending tool calls, in the calls' order.

    Calls that waited for no answer (held with those that did, as in Letta) run now.
    """
    waiting = next(
        (m for m in reversed(history) if m.role == "assistant" and m.approval_request), None
    )
    if waiting is None:
        return []
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    decisions = {a.tool_call_id: a for a in run.cmd.approvals}
    step_id = run.step_id("approvals")
    out: list[ChatMessage] = []
    for call in waiting.tool_calls:
        if call.id in answered:
            continue
        decision = decisions.get(call.id)
        held = not waiting.awaiting(call)
        approved = decision is not None and decision.approve and decision.tool_return is None
        if held or approved:
            tool_msg, _ = await tool_step(run, call, -1, step_id)
            run.state.rules.record(call.name)
        else:
            status: Literal["success", "error"] = "error"
            parts = None
            if decision is None:
                text = "Error: no decision was given for this tool call."
            elif decision.tool_return is not None:
                text, status = decision.tool_return, decision.status
                parts = decision.tool_return_parts
            else:
                text = "Error: request to call tool denied."
                if decision.reason:
                    text += f" User reason: {decision.reason}"
            tool_msg = await record_return(run, call, -1, step_id, text, status, parts)
        out.append(tool_msg)
    return out
