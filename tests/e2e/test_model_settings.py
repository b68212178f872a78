"""Model settings reach the provider, and override_model picks another model for one request.

Agents are set up through the official SDK as a Letta user would (`model_settings`,
`parallel_tool_calls`, `extra_body={"override_model": ...}`); the local OpenAI and
Anthropic servers record what the real provider SDKs sent.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import letta_client
import pytest

from tests.e2e.conftest import System
from tests.e2e.support import new_agent, send
from tests.fakes.anthropic_server import FakeAnthropic, PromptCache
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

CAPITAL_SCHEMA = {
    "name": "capital_response",
    "strict": True,
    "schema": {
        "type": "object",
        "properties": {"response": {"type": "string"}, "justification": {"type": "string"}},
        "required": ["response", "justification"],
        "additionalProperties": False,
    },
}
BLOCKS = [{"label": "human", "value": "Name: Sam"}, {"label": "persona", "value": "Helpful."}]
USER = [{"role": "user", "content": "What is the capital of France?"}]


def openai_agent_lifecycle(system: System) -> dict[str, Any]:
    client = system.client()
    agent = client.agents.create(
        model="openai/gpt-4o-mini",
        memory_blocks=BLOCKS,
        model_settings={
            "provider_type": "openai",
            "temperature": 0.2,
            "max_output_tokens": 512,
            "parallel_tool_calls": True,
            "response_format": {"type": "json_schema", "json_schema": CAPITAL_SCHEMA},
        },
    )
    reply = client.agents.messages.create(agent.id, messages=USER)
    first = system.llm.requests[-1]
    updated = client.agents.update(agent.id, parallel_tool_calls=False)
    client.agents.messages.create(agent.id, messages=USER)
    second = system.llm.requests[-1]
    return {"agent": agent, "reply": reply, "first": first, "updated": updated, "second": second}


async def test_openai_model_settings_reach_the_request(system: System, llm: FakeOpenAI) -> None:
    answer = json.dumps({"response": "Paris", "justification": "It is the capital."})
    llm.push(Reply(content=answer), Reply(content=answer))
    r = await asyncio.to_thread(openai_agent_lifecycle, system)
    first, second = r["first"], r["second"]
    assert first["temperature"] == 0.2
    assert first["max_completion_tokens"] == 512
    assert first["parallel_tool_calls"] is True
    assert first["response_format"] == {"type": "json_schema", "json_schema": CAPITAL_SCHEMA}
    # The reply is the model's JSON, untouched.
    assistant = next(m for m in r["reply"].messages if m.message_type == "assistant_message")
    assert json.loads(assistant.content)["response"] == "Paris"
    # The agent shows its settings back, and an update changes only what it names.
    # (letta-client 1.12 leaves model_settings a dict: its Optional union is not built.)
    settings = r["agent"].model_settings
    assert settings["provider_type"] == "openai" and settings["temperature"] == 0.2
    assert settings["max_output_tokens"] == 512
    assert r["updated"].model_settings["parallel_tool_calls"] is False
    assert second["parallel_tool_calls"] is False
    assert second["temperature"] == 0.2 and second["max_completion_tokens"] == 512


async def test_an_openai_reasoning_model_gets_its_effort_and_no_temperature(
    system: System, llm: FakeOpenAI
) -> None:
    client = system.client()
    agent = await asyncio.to_thread(
        client.agents.create,
        model="openai/gpt-5",
        memory_blocks=BLOCKS,
        model_settings={"provider_type": "openai", "reasoning": {"reasoning_effort": "low"}},
    )
    llm.push(Reply(content="Paris."))
    await asyncio.to_thread(client.agents.messages.create, agent.id, messages=USER)
    request = llm.requests[-1]
    assert request["reasoning_effort"] == "low"
    # Reasoning models refuse temperature and parallel_tool_calls.
    assert "temperature" not in request and "parallel_tool_calls" not in request


async def test_anthropic_thinking_and_structured_output(
    system: System, claude: FakeAnthropic
) -> None:
    client = system.client()
    agent = await asyncio.to_thread(
        client.agents.create,
        model="anthropic/claude-sonnet-5-5",
        memory_blocks=BLOCKS,
        model_settings={
            "provider_type": "anthropic",
            "max_output_tokens": 8000,
            "thinking": {"type": "enabled", "budget_tokens": 2048},
            "response_format": {"type": "json_schema", "json_schema": CAPITAL_SCHEMA},
        },
    )
    assert agent.model_settings["thinking"]["budget_tokens"] == 2048
    claude.push(
        Reply(
            thinking="The user's name should be saved first.",
            tool_calls=[("memory_insert", {"label": "human", "new_string": "Asks: capitals"})],
        ),
        Reply(content='{"response": "Paris", "justification": "capital"}'),
    )
    reply = await asyncio.to_thread(client.agents.messages.create, agent.id, messages=USER)
    first, second = claude.requests[-2:]
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert first["max_tokens"] == 8000 and first["temperature"] == 1.0
    assert first["output_config"]["format"] == {
        "type": "json_schema",
        "schema": CAPITAL_SCHEMA["schema"],
    }
    # model_settings allow parallel calls unless they say otherwise (Letta's default).
    assert first["tool_choice"] == {"type": "auto"}
    # The signed thinking goes back before the tool call it led to.
    turn = second["messages"][1]
    assert turn["role"] == "assistant"
    assert turn["content"][0]["type"] == "thinking"
    assert turn["content"][0]["thinking"] == "The user's name should be saved first."
    assert turn["content"][0]["signature"]
    assert turn["content"][1]["type"] == "tool_use"
    kinds = [m.message_type for m in reply.messages]
    assert kinds[0] == "reasoning_message"
    assert reply.messages[0].reasoning == "The user's name should be saved first."


def override_requests(system: System) -> dict[str, Any]:
    client = system.client()
    agent = client.agents.create(model="openai/gpt-4o-mini", memory_blocks=BLOCKS)
    client.agents.messages.create(
        agent.id, messages=USER, extra_body={"override_model": "openai/gpt-4o"}
    )
    overridden = system.llm.requests[-1]
    client.agents.messages.create(agent.id, messages=USER)
    after = system.llm.requests[-1]
    with pytest.raises(letta_client.NotFoundError) as refused:
        client.agents.messages.create(
            agent.id, messages=USER, extra_body={"override_model": "invalid/nonexistent-model"}
        )
    listed = client.agents.messages.list(agent.id).items
    return {
        "agent": client.agents.retrieve(agent.id),
        "overridden": overridden,
        "after": after,
        "refused": refused.value,
        "listed": listed,
    }


async def test_override_model_is_for_one_request(system: System, llm: FakeOpenAI) -> None:
    r = await asyncio.to_thread(override_requests, system)
    assert r["overridden"]["model"] == "gpt-4o"
    assert r["after"]["model"] == "gpt-4o-mini"
    assert r["agent"].model == "openai/gpt-4o-mini"
    assert "invalid/nonexistent-model" in str(r["refused"].body)
    # The refused request left nothing behind: two turns of two messages each.
    assert len([m for m in r["listed"] if m.message_type != "system_message"]) == 4


async def test_override_model_across_providers(
    system: System, llm: FakeOpenAI, claude: FakeAnthropic
) -> None:
    client = system.client()
    agent = await asyncio.to_thread(
        client.agents.create, model="openai/gpt-4o-mini", memory_blocks=BLOCKS
    )
    claude.push(Reply(content="From Claude."))
    reply = await asyncio.to_thread(
        client.agents.messages.create,
        agent.id,
        messages=USER,
        extra_body={"override_model": "anthropic/claude-haiku-5-5"},
    )
    assert reply.messages[-1].content == "From Claude."
    request = claude.requests[-1]
    assert request["model"] == "claude-haiku-5-5"
    # The override's own defaults, not the agent's: one tool call per answer (as Letta).
    assert request["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert "thinking" not in request
    assert llm.requests == []


async def test_anthropic_requests_are_marked_for_its_prompt_cache_and_read_from_it(
    system: System, claude: FakeAnthropic
) -> None:
    """As Letta marks them: the tools, the system prompt and the conversation so far, each
    step reading what the one before wrote (the system prompt stays the same while memory
    does); the usage counts the prompt whole, read or written."""
    agent = await new_agent(system, model="anthropic/claude-sonnet-5-5")
    claude.push(
        Reply(tool_calls=[("archival_memory_search", {"query": "tea"})]),
        Reply(tool_calls=[("archival_memory_search", {"query": "coffee"})]),
        Reply(content="Nothing on either."),
    )
    ran = await send(system, agent["id"], "What do I drink?")
    asked = claude.requests[-3:]
    for body in asked:
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    # The fake's cache (tests/fakes/anthropic_server.py), over these three requests again.
    cache = PromptCache()
    usages = [cache.usage(body) for body in asked]
    assert usages[0][2] == 0 < usages[1][2] < usages[2][2]
    # Each read all its predecessor wrote: the whole prompt before its own new messages.
    assert usages[1][2] == sum(usages[0]) and usages[2][2] == sum(usages[1])
    assert ran["usage"]["prompt_tokens"] == sum(sum(u) for u in usages)
    # And says how much of it was read from the cache, and written to it (as Letta does).
    assert ran["usage"]["cached_input_tokens"] == sum(u[2] for u in usages) > 0
    assert ran["usage"]["cache_write_tokens"] == sum(u[1] for u in usages) > 0
