"""The agent loop's rules, given/when/then over a run's events, with no servers.

Each test: given an agent (its tools, rules, history, and what the log already
holds of the run), when a StartRun comes with a scripted model, then the run
records these events and stops for this reason. The end-to-end tests keep
what needs processes (crashes, NATS, Postgres, the sandbox).
"""

from __future__ import annotations

import json

from o_contracts.events import LLMResponded, ToolCallRequested
from o_contracts.models import ApprovalDecision, ChatMessage, ToolCall, Usage
from o_executor.run.deps import ToolOutcome
from o_executor.run.policy import NON_USER_PREFIX
from tests.unit.loop_scenarios import (
    AGENT_ID,
    RUN_ID,
    Answer,
    agent,
    call,
    cancelled_mid_call,
    say,
    started,
    when,
)

HEARTBEAT = "Function called using request_heartbeat=true, returning control"


def nudges(then_messages: list[dict[str, object]]) -> list[str]:
    return [
        str(m["content"])
        for m in then_messages
        if m["role"] == "user" and str(m.get("content", "")).startswith(NON_USER_PREFIX)
    ]


# -- the plain loop ----------------------------------------------------------------


async def test_an_answer_without_tool_calls_ends_the_turn() -> None:
    then = await when(agent(), [say("Hello!")])
    assert then.types == ["RunStarted", "LLMResponded", "RunCompleted"]
    assert then.stop_reason == "end_turn"
    assert then.events[-1].step_count == 1


async def test_a_letta_v1_agent_goes_on_after_a_tool_call_without_asking() -> None:
    then = await when(agent(), [call("conversation_search", query="tea"), say("Found it.")])
    assert then.types == [
        "RunStarted",
        "LLMResponded",
        "ToolReturned",
        "LLMResponded",
        "RunCompleted",
    ]
    assert then.stop_reason == "end_turn"
    assert then.returns()[0].content == 'conversation_search ran with {"query": "tea"}'


async def test_a_memory_tool_is_recorded_as_requested_before_it_runs() -> None:
    then = await when(
        agent(), [call("memory_insert", label="human", new_string="Likes: tea"), say("Noted.")]
    )
    requested = [e for e in then.events if isinstance(e, ToolCallRequested)]
    assert [r.tool_name for r in requested] == ["memory_insert"]
    assert then.types.index("ToolCallRequested") < then.types.index("ToolReturned")
    assert then.deps.blocks[0]["value"] == "Name: Sam\nLikes: tea"
    # The next prompt shows the edited block.
    assert "Likes: tea" in then.asked_messages(1)[0]["content"]


# -- memgpt heartbeats ---------------------------------------------------------------


async def test_a_memgpt_agent_stops_after_a_tool_unless_it_asks_for_a_heartbeat() -> None:
    memgpt = agent("memgpt_v2_agent", tools=("send_message", "conversation_search"))
    stops = await when(memgpt, [call("conversation_search", query="x")])
    assert stops.stop_reason == "end_turn" and len(stops.model.requests) == 1
    goes_on = await when(
        memgpt,
        [
            call("conversation_search", query="x", request_heartbeat=True),
            call("send_message", message="Done."),
        ],
    )
    assert goes_on.stop_reason == "end_turn" and len(goes_on.model.requests) == 2
    assert nudges(goes_on.asked_messages(1)) == [NON_USER_PREFIX + HEARTBEAT]
    # The tools it is offered take request_heartbeat (but send_message does not).
    params = {
        t["function"]["name"]: t["function"]["parameters"]["properties"]
        for t in goes_on.model.requests[0].tools
    }
    assert "request_heartbeat" in params["conversation_search"]
    assert "request_heartbeat" not in params["send_message"]


async def test_a_tool_error_gives_a_memgpt_agent_another_step() -> None:
    memgpt = agent("memgpt_v2_agent", tools=("send_message", "memory_insert"))
    then = await when(
        memgpt,
        [
            call("memory_insert", label="nope", new_string="x"),
            call("send_message", message="Sorry."),
        ],
    )
    assert then.returns()[0].status == "error"
    assert "no memory block labelled 'nope'" in (then.returns()[0].content or "")
    assert len(then.model.requests) == 2 and then.stop_reason == "end_turn"


async def test_max_steps_stops_a_run_that_keeps_calling_tools() -> None:
    then = await when(
        agent(), [call("conversation_search", query=str(i)) for i in range(3)], max_steps=3
    )
    assert then.stop_reason == "max_steps"
    assert then.events[-1].step_count == 3


# -- tool rules --------------------------------------------------------------------


async def test_exit_loop_ends_the_turn_after_its_tool() -> None:
    rules = [{"type": "exit_loop", "tool_name": "conversation_search"}]
    then = await when(agent(rules=rules), [call("conversation_search", query="x")])
    assert then.stop_reason == "tool_rule" and len(then.model.requests) == 1


async def test_run_first_offers_only_its_tools_first_and_forces_a_call() -> None:
    rules = [{"type": "run_first", "tool_name": "conversation_search"}]
    then = await when(agent(rules=rules), [call("conversation_search", query="x"), say("ok")])
    assert then.model.offered(0) == ["conversation_search"]
    assert then.model.requests[0].force_tool
    assert set(then.model.offered(1)) == {
        "conversation_search",
        "memory_insert",
        "archival_memory_search",
    }


async def test_a_call_the_rules_forbid_is_refused_not_run() -> None:
    rules = [{"type": "run_first", "tool_name": "conversation_search"}]
    then = await when(agent(rules=rules), [call("memory_insert", label="human"), say("ok")])
    (refused,) = then.returns()
    assert refused.status == "error"
    assert (refused.content or "").startswith("[ToolConstraintError] Cannot call memory_insert")
    assert "ToolCallRequested" not in then.types
    assert then.deps.blocks[0]["value"] == "Name: Sam"


async def test_constrain_child_tools_limits_what_follows_its_tool() -> None:
    rules = [
        {
            "type": "constrain_child_tools",
            "tool_name": "conversation_search",
            "children": ["archival_memory_search"],
        }
    ]
    then = await when(
        agent(rules=rules),
        [
            call("conversation_search", query="x"),
            call("archival_memory_search", query="y"),
            say("k"),
        ],
    )
    assert then.model.offered(1) == ["archival_memory_search"]


async def test_parent_last_tool_allows_its_children_only_right_after_it() -> None:
    rules = [
        {
            "type": "parent_last_tool",
            "tool_name": "conversation_search",
            "children": ["archival_memory_search"],
        }
    ]
    then = await when(agent(rules=rules), [call("conversation_search", query="x"), say("ok")])
    assert "archival_memory_search" not in then.model.offered(0)
    assert "archival_memory_search" in then.model.offered(1)


async def test_conditional_picks_the_next_tool_by_output() -> None:
    output = 'conversation_search ran with {"query": "x"}'
    rules = [
        {
            "type": "conditional",
            "tool_name": "conversation_search",
            "child_output_mapping": {output: "memory_insert"},
            "default_child": "archival_memory_search",
        }
    ]
    then = await when(agent(rules=rules), [call("conversation_search", query="x"), say("k")])
    assert then.model.offered(1) == ["memory_insert"]


async def test_max_count_per_step_stops_offering_a_tool_used_up() -> None:
    rules = [
        {"type": "max_count_per_step", "tool_name": "conversation_search", "max_count_limit": 1}
    ]
    then = await when(agent(rules=rules), [call("conversation_search", query="x"), say("ok")])
    assert "conversation_search" in then.model.offered(0)
    assert "conversation_search" not in then.model.offered(1)


async def test_continue_loop_gives_a_memgpt_agent_another_step() -> None:
    memgpt = agent(
        "memgpt_v2_agent",
        tools=("send_message", "conversation_search"),
        rules=[{"type": "continue_loop", "tool_name": "conversation_search"}],
    )
    then = await when(
        memgpt, [call("conversation_search", query="x"), call("send_message", message="hi")]
    )
    assert len(then.model.requests) == 2 and then.stop_reason == "end_turn"


async def test_required_before_exit_keeps_the_turn_going_until_its_tool_ran() -> None:
    rules = [{"type": "required_before_exit", "tool_name": "conversation_search"}]
    then = await when(
        agent(rules=rules), [say("done?"), call("conversation_search", query="x"), say("done")]
    )
    assert then.stop_reason == "end_turn" and len(then.model.requests) == 3
    assert nudges(then.asked_messages(1)) == [
        NON_USER_PREFIX
        + "ToolRuleViolated: You must call conversation_search at least once to exit the loop."
    ]


# -- approvals and client tools ---------------------------------------------------------


async def test_requires_approval_stops_the_turn_and_waits() -> None:
    rules = [{"type": "requires_approval", "tool_name": "memory_insert"}]
    then = await when(
        agent(rules=rules),
        [Answer(calls=[("memory_insert", {"label": "human"}), ("conversation_search", {})])],
    )
    assert then.stop_reason == "requires_approval"
    answer = next(e for e in then.events if isinstance(e, LLMResponded)).message
    assert answer.approval_request and answer.approval_tool_call_ids == ["call_1"]
    assert "ToolReturned" not in then.types  # the held call waits with it


def pending(*calls: tuple[str, str]) -> list[ChatMessage]:
    """A history whose last turn asked for approval of call_1 (and held the others)."""
    tool_calls = [
        ToolCall(id=i, name=n, arguments=json.dumps({"label": "human"})) for i, n in calls
    ]
    return [
        ChatMessage(id="message-u", role="user", content="remember"),
        ChatMessage(
            id="message-a",
            role="assistant",
            tool_calls=tool_calls,
            approval_request=True,
            approval_tool_call_ids=["call_1"],
        ),
    ]


async def test_an_approved_call_runs_with_the_held_ones_then_the_model_goes_on() -> None:
    rules = [{"type": "requires_approval", "tool_name": "memory_insert"}]
    then = await when(
        agent(rules=rules),
        [say("Saved.")],
        text="",
        history=pending(("call_1", "memory_insert"), ("call_2", "conversation_search")),
        approvals=[ApprovalDecision(tool_call_id="call_1", approve=True)],
    )
    assert [r.tool_call_id for r in then.returns()] == ["call_1", "call_2"]
    assert then.stop_reason == "end_turn"


async def test_a_denied_call_is_not_run_and_the_model_is_told_why() -> None:
    rules = [{"type": "requires_approval", "tool_name": "memory_insert"}]
    then = await when(
        agent(rules=rules),
        [say("Understood.")],
        text="",
        history=pending(("call_1", "memory_insert")),
        approvals=[ApprovalDecision(tool_call_id="call_1", approve=False, reason="not now")],
    )
    (denied,) = then.returns()
    assert denied.status == "error"
    assert denied.content == "Error: request to call tool denied. User reason: not now"
    assert then.deps.blocks[0]["value"] == "Name: Sam"


async def test_a_client_tool_is_offered_and_its_call_waits_for_the_client() -> None:
    spec = {"name": "open_file", "parameters": {"type": "object", "properties": {}}}
    then = await when(agent(), [call("open_file")], client_tools=[spec])
    assert "open_file" in then.model.offered(0)
    assert then.stop_reason == "requires_approval"


async def test_a_client_tool_result_is_recorded_as_the_tool_return() -> None:
    then = await when(
        agent(),
        [say("Thanks.")],
        text="",
        history=pending(("call_1", "open_file")),
        approvals=[ApprovalDecision(tool_call_id="call_1", tool_return="file contents")],
    )
    (returned,) = then.returns()
    assert (returned.content, returned.status) == ("file contents", "success")


# -- resuming and cancelling --------------------------------------------------------------


def answered(step: int, *calls: tuple[str, str, dict[str, object]]) -> LLMResponded:
    return LLMResponded(
        run_id=RUN_ID,
        agent_id=AGENT_ID,
        step_id=f"step-{step}",
        step_number=step,
        message=ChatMessage(
            id=f"message-a{step}",
            role="assistant",
            tool_calls=[ToolCall(id=i, name=n, arguments=json.dumps(a)) for i, n, a in calls],
        ),
        usage=Usage(prompt_tokens=10),
        model="openai/gpt-4o-mini",
    )


async def test_a_resumed_run_does_not_ask_again_for_a_recorded_step() -> None:
    recorded = [started(), answered(0, ("call_9", "conversation_search", {"query": "x"}))]
    then = await when(agent(), [say("After the crash.")], recorded=recorded)
    assert len(then.model.requests) == 1
    assert "RunStarted" not in then.types and "LLMResponded" in then.types
    assert then.returns()[0].tool_call_id == "call_9"


async def test_a_call_in_doubt_on_resume_is_resolved_not_run_again() -> None:
    requested = ToolCallRequested(
        run_id=RUN_ID,
        agent_id=AGENT_ID,
        step_id="step-0",
        tool_call_id="call_9",
        tool_name="memory_insert",
    )
    recorded = [
        started(),
        answered(0, ("call_9", "memory_insert", {"label": "human", "new_string": "x"})),
        requested,
    ]
    found = ToolOutcome(True, "The core memory block with label `human` has been edited.")
    then = await when(agent(), [say("ok")], recorded=recorded, in_doubt=lambda call: found)
    assert then.returns()[0].content == found.text
    # It was looked up, not run again: the block is as the snapshot had it.
    assert then.deps.blocks[0]["value"] == "Name: Sam"
    assert "ToolCallRequested" not in then.types


async def test_a_cancelled_run_takes_no_step() -> None:
    then = await when(agent(), [], cancelled=True)
    assert then.stop_reason == "cancelled" and then.model.requests == []
    assert then.events[-1].step_count == 0


async def test_a_run_cancelled_mid_call_records_no_answer() -> None:
    then = await when(agent(), [cancelled_mid_call()])
    assert then.stop_reason == "cancelled"
    assert then.types == ["RunStarted", "RunCompleted"]
