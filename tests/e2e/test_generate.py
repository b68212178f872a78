"""POST /v1/agents/{id}/generate: one completion with the agent's model, kept nowhere.

letta-client has no call for it (Letta's own tests use raw HTTP too).
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from tests.e2e.conftest import EXECUTOR_REPLICAS, System
from tests.e2e.support import new_agent, until
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


async def test_generate_asks_the_agents_model_and_keeps_nothing(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system, model_settings={"provider_type": "openai", "temperature": 0.3})
    before = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    llm.push(Reply(content="Four.", prompt_tokens=21, completion_tokens=2))
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/generate",
        json={"prompt": "What is 2+2?", "system_prompt": "Answer in one word."},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["content"] == "Four." and body["model"] == "gpt-4o-mini"
    usage = body["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (
        21,
        2,
        23,
    )
    request = llm.requests[-1]
    # Only the prompt: no memory, no tools; the agent's settings apply.
    assert request["messages"] == [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert "tools" not in request and request["temperature"] == 0.3
    listed = await system.http.get(f"/v1/agents/{agent['id']}/messages")
    assert listed.json() == before
    runs = await system.http.get("/v1/runs/", params={"agent_id": agent["id"]})
    assert runs.json() == []


async def test_generate_with_another_model_and_a_schema(
    system: System, llm: FakeOpenAI, claude: FakeAnthropic
) -> None:
    agent = await new_agent(system)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    claude.push(Reply(tool_calls=[("structured_response", {"city": "Paris"})]))
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/generate",
        json={
            "prompt": "Capital of France?",
            "override_model": "anthropic/claude-haiku-5-5",
            "response_schema": schema,
        },
    )
    assert response.status_code == 200, response.text
    assert json.loads(response.json()["content"]) == {"city": "Paris"}
    assert response.json()["model"] == "claude-haiku-5-5"
    request = claude.requests[-1]
    assert request["tools"][0]["input_schema"] == schema
    assert request["tool_choice"]["type"] == "any"
    assert llm.requests == []


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        ({"prompt": ""}, 422, None),
        ({"prompt": "  \n\t "}, 422, None),
        ({"prompt": "hi", "override_model": "invalid/model-x"}, 404, "not found"),
        ({"prompt": "hi", "response_schema": {"n": {}}}, 422, None),
        ({"prompt": "hi", "response_schema": {"type": "string"}}, 422, None),
    ],
)
async def test_generate_refuses_bad_input(
    system: System, llm: FakeOpenAI, body: dict[str, str], status: int, detail: str | None
) -> None:
    agent = await new_agent(system)
    response = await system.http.post(f"/v1/agents/{agent['id']}/generate", json=body)
    assert response.status_code == status, response.text
    assert "detail" in response.json()
    if detail:
        assert detail in response.json()["detail"]
    assert llm.requests == []


async def test_generate_for_an_unknown_agent_is_404(system: System) -> None:
    response = await system.http.post(
        "/v1/agents/agent-00000000-0000-4000-8000-000000000000/generate", json={"prompt": "hi"}
    )
    assert response.status_code == 404
    assert "not found" in response.json()["detail"].lower()


async def test_a_provider_failure_is_502(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(Reply(status=400, error_message="bad request upstream"))
    response = await system.http.post(f"/v1/agents/{agent['id']}/generate", json={"prompt": "hi"})
    assert response.status_code == 502
    assert "LLM provider error" in response.json()["detail"]


async def test_generate_requests_wait_on_the_model_side_by_side(
    system: System, llm: FakeOpenAI
) -> None:
    # More requests than executor replicas are at the model at once: an executor answers
    # many (a memory's importance and reflections come this way too: o_memory/model_calls.py).
    agent = await new_agent(system)
    release = threading.Event()
    count = EXECUTOR_REPLICAS + 2
    llm.push(*[Reply(content=f"answer {n}", release=release) for n in range(count)])
    asked = [
        asyncio.create_task(
            system.http.post(f"/v1/agents/{agent['id']}/generate", json={"prompt": f"q{n}"})
        )
        for n in range(count)
    ]
    try:
        await until(llm, lambda requests: len(requests) == count)
    finally:
        release.set()
    answers = sorted([(await a).json()["content"] for a in asked])
    assert answers == sorted(f"answer {n}" for n in range(count))
