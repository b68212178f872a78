"""One step's question to the model: the prompt compiled, the context kept within the
window, the answer made into its LLMResponded (which the caller records before any of
its tool calls runs, or hands to the run's end: run/steps.py)."""

from __future__ import annotations

import time
from typing import Any

from o_contracts.directories import limits_of, render_directories
from o_contracts.events import LLMResponded
from o_contracts.models import ChatMessage
from o_contracts.system_prompt import compile_system, render_skills
from o_contracts.text_edits import TextEditRefused, apply_text_edits
from o_executor import llm, tokens
from o_executor.outputs import storable, storable_call
from o_executor.providers import Handle
from o_executor.run import policy
from o_executor.run.agent import AgentConfig
from o_executor.run.context import Run
from o_executor.run.deps import ModelRequest, OnText, OnToolCall
from o_executor.run.summarize import SUMMARIZE_AT, summarize
from o_executor.run.system_prompts import PromptMemory


class ContextOverflow(Exception):
    """The system prompt alone does not fit the model's context window."""


def blocks_shown(blocks: list[dict[str, Any]], agent: AgentConfig) -> list[dict[str, Any]]:
    # A canary's candidate shows its evolvable blocks as its version makes them
    # (o_executor/run/versions.py).
    if not agent.block_values and not agent.block_edits:
        return blocks
    return [b | {"value": _value(b, agent)} for b in blocks]


def _value(block: dict[str, Any], agent: AgentConfig) -> str:
    label, value = block["label"], str(block["value"])
    edits = agent.block_edits.get(label)
    if edits:
        try:
            return apply_text_edits(value, edits)
        except TextEditRefused:
            pass  # (the agent rewrote what the edit anchors on: the version's text)
    return agent.block_values.get(label, value)


async def system_prompt(run: Run, recall_count: int) -> str:
    if run.cmd.override_system is not None:
        # Letta: a request's own system prompt goes to the model exactly as given.
        return run.cmd.override_system
    core = await run.deps.core_memory()
    # An agent's folders follow its blocks; how many files may be open and how much of
    # each shows depend on its model's window (the memory service decides opens alike).
    max_open, char_limit = limits_of(run.agent.llm_config)
    memory = PromptMemory(
        system=run.agent.system_prompt,
        blocks=blocks_shown(core["blocks"], run.agent),
        directories=render_directories(core.get("directories") or [], max_open, char_limit),
        tool_rules=run.state.rules.prompt(),
    )

    def compiled() -> str:
        return (
            compile_system(
                memory.system,
                run.agent_id,
                memory.blocks,
                recall_count,
                archival_count=core["archival_count"],
                archival_tags=core["archival_tags"],
                conversation_id=run.cmd.conversation_id,
                directories=memory.directories,
            )
            + memory.tool_rules
        )

    # Compiled again only when what it says changed (run/system_prompts.py says why).
    kept = run.deps.prompts.prompt(run.agent_id, run.cmd.conversation_id, memory, compiled)
    skills = render_skills(run.cmd.client_skills)
    return kept + "\n\n" + skills if skills else kept


def text_publisher(run: Run, message_id: str) -> OnText:
    async def publish(text: str) -> None:
        await run.deps.publish({"message_id": message_id, "text": text})

    return publish


def tool_call_publisher(run: Run, message_id: str) -> OnToolCall:
    """Tool-call pieces as they stream, for calls a client sees as tool_call_message
    (policy.streams_call says which)."""
    streaming: set[str] = set()
    state = run.state

    async def publish(call_id: str, name: str | None, arguments: str) -> None:
        if name is not None and policy.streams_call(
            name, state.rules, state.client_tools, run.agent.heartbeats
        ):
            streaming.add(call_id)
        if call_id not in streaming:
            return
        piece = {"id": call_id, "name": name, "arguments": arguments}
        await run.deps.publish({"message_id": message_id, "tool_call": piece})

    return publish


async def ask_model(
    run: Run,
    handle: Handle,
    tools: list[dict[str, Any]],
    messages: list[ChatMessage],
    step: int,
    step_id: str,
    force_tool: bool,
) -> LLMResponded:
    """The model's answer for this step, not yet recorded. Raises ContextOverflow,
    RunCancelled, llm.LLMError."""
    state = run.state
    step_start_ns = time.time_ns()
    system = await system_prompt(run, len(messages))
    window = run.model.window
    family = llm.family(handle)
    if state.tokens(tokens.estimate_text(system, family)) > window:
        raise ContextOverflow(
            f"the system prompt (with memory blocks) needs about"
            f" {state.tokens(tokens.estimate_text(system, family))} tokens; the context"
            f" window of {handle} is {window}"
        )
    wire = llm.to_openai_messages(messages)
    estimated = tokens.estimate_request(system, wire, tools, family)
    if state.tokens(estimated) > SUMMARIZE_AT * window:
        if await summarize(run, handle, messages, step, window):
            wire = llm.to_openai_messages(messages)
            estimated = tokens.estimate_request(system, wire, tools, family)
    reply_id = run.message_id(step, "assistant")
    streaming = run.cmd.stream_tokens
    # (The call's span and metrics: o_executor/llm_telemetry.py, around every LLM call.)
    llm_request_start_ns, asked = time.time_ns(), time.perf_counter_ns()
    result = await run.deps.complete(
        ModelRequest(
            handle,
            [{"role": "system", "content": system}, *wire],
            tools,
            stream=streaming,
            force_tool=force_tool,
            settings=run.model.settings,
            on_text=text_publisher(run, reply_id) if streaming else None,
            on_tool_call=tool_call_publisher(run, reply_id) if streaming else None,
            step_id=step_id,
        )
    )
    llm_request_ns = time.perf_counter_ns() - asked
    state.tokens.learn(estimated, result.usage.prompt_tokens)
    content = storable(result.content) if result.content is not None else None
    calls = [storable_call(c) for c in result.tool_calls]
    # Calls that need a person's approval, or that the client runs itself, are
    # not run: the turn stops and waits for their answers. The other calls of
    # the response are held and run with the answers (as in Letta).
    waiting = policy.waiting_calls(calls, state.rules, state.client_tools)
    reply = ChatMessage(
        id=reply_id,
        role="assistant",
        content=content,
        reasoning=storable(result.reasoning) if result.reasoning is not None else None,
        reasoning_signature=result.reasoning_signature,
        tool_calls=calls,
        approval_request=True if waiting else None,
        approval_tool_call_ids=waiting or None,
    )
    state.usage = state.usage + result.usage
    return LLMResponded(
        run_id=run.run_id,
        agent_id=run.agent_id,
        step_id=step_id,
        step_number=step,
        message=reply,
        usage=result.usage,
        model=str(handle),
        finish_reason=result.finish_reason,
        step_start_ns=step_start_ns,
        llm_request_start_ns=llm_request_start_ns,
        llm_request_ns=llm_request_ns,
    )
