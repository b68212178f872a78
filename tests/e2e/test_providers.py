"""Providers: Anthropic through its SDK, OpenAI-compatible ones by base URL, retries, errors."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import System
from tests.e2e.support import merged, new_agent, parse_sse, send
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


async def test_an_anthropic_agent_calls_tools_and_replies(
    system: System, claude: FakeAnthropic
) -> None:
    agent = await new_agent(system, model="anthropic/claude-sonnet-5-5")
    assert agent["llm_config"]["model_endpoint_type"] == "anthropic"
    assert agent["llm_config"]["context_window"] == 200000
    claude.push(
        Reply(
            content="Saving that.",
            tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: rain"})],
            prompt_tokens=50,
            completion_tokens=7,
        ),
        Reply(content="Noted, Sam.", prompt_tokens=60, completion_tokens=3),
    )
    result = await send(system, agent["id"], "I like rain")
    assert [m["message_type"] for m in result["messages"]] == [
        "assistant_message",
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    assert result["messages"][-1]["content"] == "Noted, Sam."
    assert (result["usage"]["prompt_tokens"], result["usage"]["completion_tokens"]) == (110, 10)
    first, second = claude.requests[-2:]
    assert "Name: Sam" in first["system"] and first["model"] == "claude-sonnet-5-5"
    assert {t["name"] for t in first["tools"]} >= {"memory_insert", "memory_replace"}
    assert all("input_schema" in t for t in first["tools"])
    # The tool's result went back as a tool_result block answering the tool_use.
    tool_use = second["messages"][1]["content"][-1]
    tool_result = second["messages"][2]["content"][0]
    assert tool_use["type"] == "tool_use" and tool_use["input"]["new_string"] == "Likes: rain"
    assert tool_result == {
        "type": "tool_result",
        "tool_use_id": tool_use["id"],
        "content": "The core memory block with label `human` has been edited.",
    }
    human = await system.http.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human")
    assert human.json()["value"] == "Name: Sam\nLikes: rain"


async def test_anthropic_streaming(system: System, claude: FakeAnthropic) -> None:
    agent = await new_agent(system, model="anthropic/claude-haiku-5-5")
    claude.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "x " * 30})]),
        Reply(content="Streamed from Claude."),
    )
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/stream",
        json={"messages": [{"role": "user", "content": "hi"}], "stream_tokens": True},
    )
    pieces = [
        d
        for _, d in parse_sse(response.text)
        if d != "[DONE]" and d["message_type"] == "tool_call_message"
    ]
    assert len(pieces) > 1  # the tool call's input streamed in pieces (input_json_delta)
    events = [d for _, d in merged(parse_sse(response.text))]
    kinds = [d if d == "[DONE]" else d["message_type"] for d in events]
    assert events[2]["content"] == "Streamed from Claude."
    assert kinds == [
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
        "stop_reason",
        "usage_statistics",
        "[DONE]",
    ]
    assert json.loads(events[0]["tool_call"]["arguments"]) == {
        "label": "human",
        "new_string": "x " * 30,
    }
    assert all(r.get("stream") for r in claude.requests)


async def test_a_429_is_retried(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(Reply(status=429), Reply(status=503), Reply(content="third time lucky"))
    result = await send(system, agent["id"], "hello")
    assert result["messages"][0]["content"] == "third time lucky"
    assert len(llm.requests) == 3


async def test_exhausted_retries_end_the_run_with_llm_api_error(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(*[Reply(status=500, error_message="upstream down")] * 4)
    result = await send(system, agent["id"], "hello")
    assert result["stop_reason"]["stop_reason"] == "llm_api_error"
    assert len(llm.requests) == 4
    run_id = result["usage"]["run_ids"][0]
    run = (await system.http.get(f"/v1/runs/{run_id}")).json()
    assert run["status"] == "failed" and run["stop_reason"] == "llm_api_error"


async def test_an_anthropic_auth_error_is_not_retried(
    system: System, claude: FakeAnthropic
) -> None:
    agent = await new_agent(system, model="anthropic/claude-sonnet-5-5")
    claude.push(Reply(status=401, error_message="invalid x-api-key"))
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/stream",
        json={"messages": [{"role": "user", "content": "hi"}]},
    )
    events = parse_sse(response.text)
    error = next(d for e, d in events if e == "error")
    assert error["error_type"] == "llm_api_error"
    assert "refused the credentials (401)" in error["message"]
    assert len(claude.requests) == 1


async def test_an_error_mid_stream_before_any_text_is_retried(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    insert = ("memory_insert", {"label": "human", "new_string": "Likes: retries"})
    llm.push(
        Reply(tool_calls=[insert], error_mid_stream=True),
        Reply(tool_calls=[insert]),
        Reply(content="ok"),
    )
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/stream",
        json={"messages": [{"role": "user", "content": "hi"}], "stream_tokens": True},
    )
    events = [d for _, d in merged(parse_sse(response.text))]
    assert [d if d == "[DONE]" else d["message_type"] for d in events][:4] == [
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
        "stop_reason",
    ]
    assert len(llm.requests) == 3
    human = await system.http.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human")
    assert human.json()["value"] == "Name: Sam\nLikes: retries"


async def test_a_token_stream_that_breaks_part_way_is_an_error_event(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="this breaks halfway through", error_mid_stream=True))
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/stream",
        json={"messages": [{"role": "user", "content": "hi"}], "stream_tokens": True},
    )
    events = parse_sse(response.text)
    # The part already shown cannot be taken back, so the step is not retried.
    assert events[0][1]["message_type"] == "assistant_message"
    error = next(d for e, d in events if e == "error")
    assert error["error_type"] == "llm_api_error" and "part-way" in error["message"]
    assert [d for _, d in events][-3:-1][0]["stop_reason"] == "llm_api_error"
    assert len(llm.requests) == 1


async def test_a_malformed_tool_call_is_a_tool_error_and_the_run_goes_on(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(
        Reply(tool_calls=[("memory_insert", {})], raw_arguments='{"label": "human", "new_'),
        Reply(content="Sorry, let me retry later."),
    )
    result = await send(system, agent["id"], "remember")
    ret = result["messages"][1]
    assert ret["message_type"] == "tool_return_message" and ret["status"] == "error"
    assert "invalid arguments" in ret["tool_return"]
    assert result["stop_reason"]["stop_reason"] == "end_turn"


async def test_a_user_named_openai_compatible_provider(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system, model="lab/qwen3-32b")
    assert agent["llm_config"]["model_endpoint"] == llm.base_url
    llm.push(Reply(content="from the lab"))
    result = await send(system, agent["id"], "hi")
    assert result["messages"][0]["content"] == "from the lab"
    assert llm.requests[-1]["model"] == "qwen3-32b"
    unknown = await system.http.post("/v1/agents/", json={"model": "nowhere/x"})
    assert unknown.status_code == 400
    assert "'nowhere' is not configured" in unknown.json()["detail"]


async def test_models_lists_every_configured_provider(system: System) -> None:
    models = (await system.http.get("/v1/models/")).json()
    handles = {m["handle"] for m in models}
    assert {"openai/gpt-4o-mini", "anthropic/claude-sonnet-5-5", "lab/gpt-4o-mini"} <= handles
    assert not any("embedding" in h for h in handles)
    by_handle = {m["handle"]: m for m in models}
    assert by_handle["anthropic/claude-sonnet-5-5"]["model_endpoint_type"] == "anthropic"
    embeddings = (await system.http.get("/v1/models/embedding")).json()
    assert "openai/text-embedding-3-small" in {e["handle"] for e in embeddings}
    small = next(e for e in embeddings if e["handle"] == "openai/text-embedding-3-small")
    assert small["embedding_dim"] == 1536
