"""The loop's rules, as pure functions: which tools the model sees, what follows its answer
and its tool calls. No I/O here: tests/unit/test_loop_policy.py and the given/when/then
tests (tests/unit/test_loop_rules.py) exercise them in milliseconds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from o_contracts.base_tools import openai_tools
from o_contracts.ids import derived_id
from o_contracts.models import ChatMessage, ToolCall
from o_contracts.tool_rules import ToolRuleSolver
from o_executor.run.agent import AgentConfig
from o_executor.run.stop import StopReason

NON_USER_PREFIX = "[This is an automated system message hidden from the user] "
# Tools without effects outside the run: running one again after a crash is harmless.
# Reads (a repeated archival search only refreshes access times): safe to run again.
PURE_TOOLS = frozenset(
    {
        "send_message",
        "conversation_search",
        "memory_finish_edits",
        "archival_memory_search",
        "grep_files",
        "semantic_search_files",
        # Reads of the web: asking again after a crash changes nothing anywhere.
        "web_search",
        "fetch_webpage",
    }
)
_HEARTBEAT_PARAMETER = {
    "type": "boolean",
    "description": "Request an immediate heartbeat after function execution."
    " Set to true if you want to send a follow-up message or run a follow-up"
    " function.",
}


def with_heartbeat(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """memgpt agents' tools (all but send_message) take `request_heartbeat`."""
    out = []
    for tool in tools:
        fn = tool["function"]
        if fn["name"] != "send_message":
            params = fn["parameters"]
            props = {**params["properties"], "request_heartbeat": _HEARTBEAT_PARAMETER}
            fn = {**fn, "parameters": {**params, "properties": props}}
        out.append({"type": "function", "function": fn})
    return out


def tool_schemas(
    agent: AgentConfig, allowed: set[str], client_tools: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The tools the model may call now: the agent's (built-in and users') that the rules
    allow, then the client's own (a client tool stands in for one of the same name)."""
    own = openai_tools([n for n in agent.tools if n in allowed and n not in client_tools]) + [
        {"type": "function", "function": t.json_schema}
        for name, t in agent.user_tools.items()
        if name in allowed and name not in client_tools
    ]
    if agent.heartbeats:
        own = with_heartbeat(own)
    return own + [{"type": "function", "function": spec} for spec in client_tools.values()]


def client_tool_specs(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The request's client tools, by name, in the shape the model is given."""
    return {
        str(t["name"]): {
            "name": t["name"],
            "description": t.get("description") or "",
            "parameters": t.get("parameters") or {"type": "object", "properties": {}},
        }
        for t in tools
        if t.get("name")
    }


def waiting_calls(
    calls: list[ToolCall], rules: ToolRuleSolver, client_tools: dict[str, Any]
) -> list[str]:
    """Calls that are not run now: a person must approve them, or the client runs them."""
    return [c.id for c in calls if rules.requires_approval(c.name) or c.name in client_tools]


def streams_call(
    name: str, rules: ToolRuleSolver, client_tools: dict[str, Any], heartbeats: bool
) -> bool:
    """Whether a tool call's pieces are streamed as tool_call_message deltas.

    Not: calls that will wait for approval or for the client (they show as
    approval_request_message once recorded) and memgpt agents' send_message
    (shown as the assistant's text once recorded).
    """
    hidden = (
        rules.requires_approval(name)
        or name in client_tools
        or (heartbeats and name == "send_message")
    )
    return not hidden


def nudge(run_id: str, step: int, text: str) -> ChatMessage:
    """A hidden message that keeps the loop going; derived from recorded facts, so a
    resumed run derives it again instead of storing it."""
    return ChatMessage(
        id=derived_id("message", run_id, str(step), "nudge"),
        role="user",
        content=f"{NON_USER_PREFIX}{text}",
    )


def refusal(call: ToolCall, allowed: set[str]) -> str:
    """What the model is told of a call the tool rules forbid (it is not run)."""
    return (
        f"[ToolConstraintError] Cannot call {call.name}, valid tools to call include:"
        f" {sorted(allowed)}."
    )


# -- what follows --------------------------------------------------------------


@dataclass(frozen=True)
class Continue:
    """Another step; `nudge` is a hidden message to add first, if any."""

    nudge: str | None = None


@dataclass(frozen=True)
class Stop:
    reason: StopReason


@dataclass(frozen=True)
class AwaitApproval:
    """The answer's calls wait for a person or the client: the turn stops here."""


@dataclass(frozen=True)
class RunTools:
    """The answer's tool calls run now."""


def after_answer(
    reply: ChatMessage, rules: ToolRuleSolver, available: set[str], final: bool
) -> Continue | Stop | AwaitApproval | RunTools:
    """What follows the model's answer."""
    if reply.approval_request and reply.tool_calls:
        return AwaitApproval()
    if reply.tool_calls:
        return RunTools()
    uncalled = rules.uncalled_required(available)
    if uncalled and not final:
        return Continue(
            f"ToolRuleViolated: You must call {', '.join(uncalled)} at least once to exit the loop."
        )
    return Stop(StopReason.END_TURN)


@dataclass
class CallsDone:
    """What the answer's tool calls, run, say about the next step."""

    # A terminal rule's tool ran.
    terminal: bool = False
    # A call ended the turn (send_message).
    ends_turn: bool = False
    # Something asks for another step (memgpt agents must ask; others always go on).
    another_step: bool = False


def asks_another_step(call: ToolCall, result: ChatMessage, rules: ToolRuleSolver) -> bool:
    """A call asks for another step: request_heartbeat, an error to react to, or a
    rule that continues the loop after it."""
    return call.wants_heartbeat() or result.status == "error" or rules.continues(call.name)


def after_calls(
    done: CallsDone,
    rules: ToolRuleSolver,
    available: set[str],
    final: bool,
    heartbeats: bool,
) -> Continue | Stop:
    """What follows the answer's tool calls."""
    if done.terminal:
        return Stop(StopReason.TOOL_RULE)
    uncalled = rules.uncalled_required(available)
    if uncalled and not final:
        return Continue(
            f"Continuing, user expects these tools: [{', '.join(uncalled)}] to be called still."
        )
    if done.ends_turn or not (done.another_step or not heartbeats):
        return Stop(StopReason.END_TURN)
    if heartbeats:
        return Continue("Function called using request_heartbeat=true, returning control")
    return Continue()
