"""GET /v1/agents/{id}/context: Letta's ContextWindowOverview of the agent's next prompt.

letta-client has no call for it; Letta's own tests read it with `client.get`.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import System
from tests.e2e.support import send
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


async def test_the_context_overview_describes_the_next_prompt(
    system: System, llm: FakeOpenAI
) -> None:
    created = await system.http.post(
        "/v1/agents/",
        json={
            "model": "openai/gpt-4o-mini",
            "system": "You are a test agent.",
            "memory_blocks": [
                {"label": "human", "value": "Name: Sam"},
                {"label": "persona", "value": "Helpful."},
            ],
            "tool_rules": [{"type": "exit_loop", "tool_name": "memory_insert"}],
        },
    )
    agent = created.json()
    llm.push(Reply(content="Hello Sam."))
    await send(system, agent["id"], "Hi there")
    overview = (await system.http.get(f"/v1/agents/{agent['id']}/context")).json()
    assert overview["context_window_size_max"] == 128000
    assert overview["system_prompt"] == "You are a test agent."
    assert "Name: Sam" in overview["core_memory"] and "<persona>" in overview["core_memory"]
    assert "memory_insert" in overview["tool_usage_rules"]
    names = {f["function"]["name"] for f in overview["functions_definitions"]}
    assert {"memory_insert", "memory_replace", "conversation_search"} <= names
    assert [(m["role"], m["content"][0]["text"]) for m in overview["messages"]] == [
        ("user", "Hi there"),
        ("assistant", "Hello Sam."),
    ]
    # Recall holds the system message too (Letta counts it); the context has the turn.
    assert overview["num_messages"] == 2 and overview["num_recall_memory"] == 3
    assert "2 previous messages" in overview["external_memory_summary"]
    sections = [
        "num_tokens_system",
        "num_tokens_core_memory",
        "num_tokens_external_memory_summary",
        "num_tokens_tool_usage_rules",
        "num_tokens_functions_definitions",
        "num_tokens_messages",
    ]
    assert all(overview[s] > 0 for s in sections)
    assert overview["context_window_size_current"] == sum(overview[s] for s in sections)
    # The same prompt, estimated the same way, after another turn: it grew.
    llm.push(Reply(content="Still here."))
    await send(system, agent["id"], "Are you there?")
    later = (await system.http.get(f"/v1/agents/{agent['id']}/context")).json()
    assert later["num_tokens_messages"] > overview["num_tokens_messages"]
    assert later["num_messages"] == 4


async def test_the_context_of_an_unknown_agent_is_404(system: System) -> None:
    response = await system.http.get(
        "/v1/agents/agent-00000000-0000-4000-8000-000000000000/context"
    )
    assert response.status_code == 404
    assert "not found" in response.json()["detail"]
