"""Tool rules and heartbeats in the running loop (the decisions themselves: unit tests)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import System
from tests.e2e.support import new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

INSERT = ("memory_insert", {"label": "human", "new_string": "x"})
SEARCH = ("conversation_search", {"query": "x"})


def tool_names(request: dict) -> set[str]:  # type: ignore[type-arg]
    return {t["function"]["name"] for t in request.get("tools", [])}


async def test_invalid_rules_are_refused_naming_the_rule(system: System) -> None:
    response = await system.http.post(
        "/v1/agents/",
        json={
            "model": "openai/gpt-4o-mini",
            "tool_rules": [
                {"type": "exit_loop", "tool_name": "memory_insert"},
                {"type": "max_count_per_step", "tool_name": "memory_insert"},
            ],
        },
    )
    assert response.status_code == 422
    assert response.json()["detail"].startswith(
        "tool_rules[1] (max_count_per_step on 'memory_insert'): max_count_limit"
    )
    agent = await new_agent(system)
    patched = await system.http.patch(
        f"/v1/agents/{agent['id']}", json={"tool_rules": [{"type": "nope", "tool_name": "x"}]}
    )
    assert patched.status_code == 422 and "unknown type 'nope'" in patched.json()["detail"]


async def test_run_first_exit_loop_and_a_forbidden_call(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(
        system,
        tool_rules=[
            {"type": "run_first", "tool_name": "conversation_search"},
            {
                "type": "constrain_child_tools",
                "tool_name": "conversation_search",
                "children": ["memory_insert"],
            },
            {"type": "exit_loop", "tool_name": "memory_insert"},
        ],
    )
    llm.push(Reply(tool_calls=[SEARCH]), Reply(tool_calls=[SEARCH]), Reply(tool_calls=[INSERT]))
    result = await send(system, agent["id"], "go")
    first, second, third = llm.requests[-3:]
    # run_first: only that tool, and a tool call is required.
    assert tool_names(first) == {"conversation_search"} and first["tool_choice"] == "required"
    assert "<tool_usage_rules>" in first["messages"][0]["content"]
    # After it, only its children are offered; a forbidden call is refused, not run.
    assert tool_names(second) == {"memory_insert"}
    returns = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
    assert returns[1]["status"] == "error"
    assert returns[1]["tool_return"].startswith("[ToolConstraintError] Cannot call")
    assert tool_names(third) == {"memory_insert"}
    # exit_loop: the turn ends right after the tool ran.
    assert result["stop_reason"]["stop_reason"] == "tool_rule"
    assert returns[2]["status"] == "success"


async def test_required_before_exit_keeps_the_loop_going(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(
        system, tool_rules=[{"type": "required_before_exit", "tool_name": "memory_insert"}]
    )
    llm.push(Reply(content="bye"), Reply(tool_calls=[INSERT]), Reply(content="bye now"))
    result = await send(system, agent["id"], "hi")
    assert result["stop_reason"]["stop_reason"] == "end_turn"
    assert result["usage"]["step_count"] == 3
    nudge = llm.requests[-2]["messages"][-1]
    assert nudge["role"] == "user"
    assert "You must call memory_insert at least once to exit the loop" in nudge["content"]


async def test_max_steps(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(*[Reply(tool_calls=[SEARCH])] * 2)
    result = await send(system, agent["id"], "loop", max_steps=2)
    assert result["stop_reason"]["stop_reason"] == "max_steps"
    assert result["usage"]["step_count"] == 2


async def test_memgpt_heartbeats(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system, agent_type="memgpt_v2_agent")
    llm.push(
        Reply(tool_calls=[("memory_insert", {**INSERT[1], "request_heartbeat": True})]),
        Reply(tool_calls=[("memory_insert", {**INSERT[1], "request_heartbeat": False})]),
    )
    result = await send(system, agent["id"], "remember x twice")
    # The heartbeat asked for a second step; without one the turn ends.
    assert result["usage"]["step_count"] == 2
    assert result["stop_reason"]["stop_reason"] == "end_turn"
    schema = next(t for t in llm.requests[-1]["tools"] if t["function"]["name"] == "memory_insert")
    assert "request_heartbeat" in schema["function"]["parameters"]["properties"]
    assert "request_heartbeat=true" in llm.requests[-1]["messages"][-1]["content"]
    human = await system.http.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human")
    assert human.json()["value"] == "Name: Sam\nx\nx"
