"""One tool call of the model's answer: recorded as requested (when it has effects), run,
and its result recorded before the next step. A call the log already answered is not
run again; one requested but never answered is in doubt (RunDeps.resolve_in_doubt)."""

from __future__ import annotations

from typing import Literal

from opentelemetry.trace import StatusCode

from o_contracts.base_tools import EVOLUTION_TOOLS, MEMORY_TOOLS
from o_contracts.events import ToolCallRequested, ToolReturned
from o_contracts.ids import derived_id
from o_contracts.limits import check_storable
from o_contracts.models import ChatMessage, ContentPart, ToolCall
from o_executor.llm_telemetry import tool_span
from o_executor.outputs import MAX_TOOL_RETURN_CHARS, bounded, tool_output
from o_executor.run import policy
from o_executor.run.context import Run
from o_executor.run.deps import ToolOutcome


def memory_command_id(run_id: str, call_id: str, attempt: str = "") -> str:
    """The id of the memory command a memory tool call sends (ToolCallRequested names it)."""
    return derived_id("cmd", run_id, call_id, *([attempt] if attempt else []))


async def call_tool(run: Run, call: ToolCall) -> ToolOutcome:
    """Run a call the agent may make, through its dependencies."""
    if not run.agent.has_tool(call.name):
        if call.name in EVOLUTION_TOOLS:
            # (From a tool list of before evolution was turned off.)
            return ToolOutcome(
                False,
                f"tool '{call.name}' is not available: evolution is off for this agent,"
                " or its operator has not given it evolution tools",
            )
        return ToolOutcome(False, f"tool '{call.name}' is not available to this agent")
    try:
        args = call.argument_object()
        # (a NUL written as \\u0000, an integer beyond 64 bits: never recorded)
        check_storable(args, max_text_bytes=None)
    except ValueError as exc:
        return ToolOutcome(False, f"invalid arguments for {call.name}: {exc}")
    # request_heartbeat is the loop's argument (memgpt agents), never the tool's.
    args.pop("request_heartbeat", None)
    if call.name == "send_message":
        return ToolOutcome(True, "None", ends_turn=True)
    with tool_span(call.name, call.id) as span:
        outcome = await run.deps.run_tool(call, args)
        if not outcome.ok and span.is_recording():
            span.set_attribute("error.type", "tool_error")
            span.set_status(StatusCode.ERROR)
        return outcome


async def tool_step(run: Run, call: ToolCall, step: int, step_id: str) -> tuple[ChatMessage, bool]:
    """The call's result message, and whether it ends the turn."""
    recorded = run.inputs.recorded
    returned = recorded.returned.get(call.id)
    if returned is not None:
        ends = call.name == "send_message" and returned.message.status == "success"
        return returned.message, ends
    requested = recorded.requested.get(call.id)
    if requested is not None:
        resolved = await run.deps.resolve_in_doubt(call, requested[1])
        outcome = resolved if resolved is not None else await call_tool(run, call)
    else:
        if run.agent.has_tool(call.name) and call.name not in policy.PURE_TOOLS:
            await run.record(
                ToolCallRequested(
                    run_id=run.run_id,
                    agent_id=run.agent_id,
                    step_id=step_id,
                    tool_call_id=call.id,
                    tool_name=call.name,
                    command_id=memory_command_id(run.run_id, call.id)
                    if call.name in MEMORY_TOOLS
                    else None,
                ),
                f"tool-requested-{step}-{call.id}",
            )
        outcome = await call_tool(run, call)
    tool_msg = await append_return(
        run,
        call,
        step,
        step_id,
        outcome.text,
        "success" if outcome.ok else "error",
        outcome.stdout,
        outcome.stderr,
    )
    return tool_msg, outcome.ends_turn


async def record_return(
    run: Run,
    call: ToolCall,
    step: int,
    step_id: str,
    text: str,
    status: Literal["success", "error"],
    parts: list[ContentPart] | None = None,
) -> ChatMessage:
    """A tool result that did not come from running the tool here (a refusal, an answer;
    `parts`: a client's result with images)."""
    returned = run.inputs.recorded.returned.get(call.id)
    if returned is not None:
        return returned.message
    return await append_return(run, call, step, step_id, text, status, parts=parts)


async def refuse(
    run: Run, call: ToolCall, step: int, step_id: str, allowed: set[str]
) -> ChatMessage:
    """A call the tool rules forbid: not run; the model is told what it may call."""
    return await record_return(run, call, step, step_id, policy.refusal(call, allowed), "error")


async def append_return(
    run: Run,
    call: ToolCall,
    step: int,
    step_id: str,
    text: str,
    status: Literal["success", "error"],
    stdout: list[str] | None = None,
    stderr: list[str] | None = None,
    parts: list[ContentPart] | None = None,
) -> ChatMessage:
    """Record a tool call's result (ToolReturned) and give it as the tool message.

    The result is made storable and bounded (outputs.py): whatever a tool or a
    client returns, the event fits the log.
    """
    tool_msg = ChatMessage(
        id=run.message_id(step, call.id),
        role="tool",
        name=call.name,
        tool_call_id=call.id,
        content=bounded(text, MAX_TOOL_RETURN_CHARS),
        # (Parts come from a client's request, already held to the request's limits.)
        parts=parts,
        status=status,
        stdout=tool_output(stdout),
        stderr=tool_output(stderr),
    )
    await run.record(
        ToolReturned(run_id=run.run_id, agent_id=run.agent_id, step_id=step_id, message=tool_msg),
        f"tool-{step}-{call.id}",
    )
    return tool_msg
