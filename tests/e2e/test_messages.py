"""A user message's round trip: gateway -> executor -> LLM (openai SDK over HTTP) -> reply."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Any

import pytest

from tests.e2e.conftest import System
from tests.e2e.support import merged, new_agent, parse_sse, send
from tests.fakes.openai_server import FakeOpenAI, PrefixCache, Reply

pytestmark = pytest.mark.e2e


def system_prompt(request: dict[str, Any]) -> str:
    first = request["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


async def test_plain_reply(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="Hello Sam!", prompt_tokens=120, completion_tokens=4))
    result = await send(system, agent["id"], "hi there")
    assert [m["message_type"] for m in result["messages"]] == ["assistant_message"]
    assert result["messages"][0]["content"] == "Hello Sam!"
    assert result["stop_reason"]["stop_reason"] == "end_turn"
    usage = result["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["step_count"]) == (120, 4, 1)
    # The LLM saw the compiled context: memory blocks rendered, then the user message.
    prompt = system_prompt(llm.requests[-1])
    assert "<human>" in prompt and "Name: Sam" in prompt and "chars_limit=100000" in prompt
    assert llm.requests[-1]["messages"][-1] == {"role": "user", "content": "hi there"}
    assert llm.requests[-1]["model"] == "gpt-4o-mini"
    history = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    # The default conversation opens with the compiled system prompt (as in Letta).
    assert history[0]["message_type"] == "system_message"
    assert (
        "Name: Sam" in history[0]["content"]
        and "- CONVERSATION_ID: default" in history[0]["content"]
    )
    assert [(m["message_type"], m["content"]) for m in history[1:]] == [
        ("user_message", "hi there"),
        ("assistant_message", "Hello Sam!"),
    ]


async def test_memory_tools_change_blocks_and_the_next_context(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system, tools=["core_memory_append"])
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: green tea"})]),
        Reply(
            tool_calls=[
                ("memory_replace", {"label": "human", "old_string": "Sam", "new_string": "Sam Lee"})
            ]
        ),
        Reply(
            tool_calls=[("core_memory_append", {"label": "persona", "content": "Remembers tea."})]
        ),
        Reply(content="Noted."),
    )
    result = await send(system, agent["id"], "I like green tea. My surname is Lee.")
    types = [m["message_type"] for m in result["messages"]]
    assert types == ["tool_call_message", "tool_return_message"] * 3 + ["assistant_message"]
    returns = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
    assert [r["status"] for r in returns] == ["success"] * 3
    assert result["usage"]["step_count"] == 4
    blocks = {
        b["label"]: b["value"]
        for b in (await system.http.get(f"/v1/agents/{agent['id']}/core-memory/blocks")).json()
    }
    assert blocks == {
        "human": "Name: Sam Lee\nLikes: green tea",
        "persona": "Helpful.\nRemembers tea.",
    }
    # Each LLM request after an edit saw the edited block.
    prompts = [system_prompt(r) for r in llm.requests[-4:]]
    assert "Likes: green tea" not in prompts[0]
    assert "Name: Sam\nLikes: green tea" in prompts[1]
    assert "Name: Sam Lee\nLikes: green tea" in prompts[2]
    assert "Remembers tea." in prompts[3]


async def test_the_system_prompt_stays_the_same_until_memory_changes(
    system: System, llm: FakeOpenAI
) -> None:
    """As in Letta: the prompt (its metadata's time and counts included) is compiled again
    only when memory changes, so a provider's prompt cache serves it step after step."""
    agent = await new_agent(system)
    llm.push(
        Reply(tool_calls=[("archival_memory_search", {"query": "tea"})]),
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})]),
        Reply(tool_calls=[("archival_memory_search", {"query": "coffee"})]),
        Reply(content="Noted."),
    )
    await send(system, agent["id"], "I like tea. Do you know what else I drink?")
    prompts = [system_prompt(r) for r in llm.requests[-4:]]
    # The second step's context has three messages, the first's one: the same prompt.
    assert prompts[0] == prompts[1] and counted(prompts[0]) == "- 1 previous messages"
    # The memory edit has it compiled again, brought up to date; then kept again.
    assert "Likes: tea" in prompts[2] and counted(prompts[2]) == "- 5 previous messages"
    assert prompts[3] == prompts[2]


async def test_the_usage_says_how_much_of_the_prompt_the_provider_had_cached(
    system: System, llm: FakeOpenAI
) -> None:
    """OpenAI caches a prompt's prefix of 1,024 tokens or more by itself: the second step
    of a tool loop, sending the first's prompt again and more, is served from it in part
    (the fake's cache, tests/fakes/openai_server.py); a run's usage sums what each step's
    response said, as Letta's cached_input_tokens."""
    # (A persona long enough for a prompt over OpenAI's 1,024 tokens, as real ones are.)
    persona = "Helpful, patient and precise; remembers what matters to the user. " * 80
    agent = await new_agent(
        system,
        memory_blocks=[
            {"label": "human", "value": "Name: Sam"},
            {"label": "persona", "value": persona},
        ],
    )
    llm.push(
        Reply(tool_calls=[("archival_memory_search", {"query": "tea"})]),
        Reply(content="Nothing on tea."),
    )
    ran = await send(system, agent["id"], "What do I drink?")
    cache = PrefixCache()
    cached = [cache.cached_tokens(r) for r in llm.requests[-2:]]
    assert cached[0] == 0 and cached[1] >= PrefixCache.MIN_CACHED
    assert ran["usage"]["cached_input_tokens"] == cached[1]
    assert ran["usage"]["cache_write_tokens"] is None  # (OpenAI does not say)
    run_id = ran["usage"]["run_ids"][0]
    run = (await system.http.get(f"/v1/runs/{run_id}")).json()
    assert run["status"] == "completed"
    # Each step says its own, as Letta's steps do: a count only where there was one, and
    # the provider's words in prompt_tokens_details.
    steps = (await system.http.get(f"/v1/runs/{run_id}/steps", params={"order": "asc"})).json()
    shown = [(s["cached_input_tokens"], s["prompt_tokens_details"]) for s in steps]
    none = {"cache_read_tokens": None, "cache_creation_tokens": None}
    assert shown == [
        (None, {"cached_tokens": 0, **none}),
        (cached[1], {"cached_tokens": cached[1], **none}),
    ]
    assert [s["cache_write_tokens"] for s in steps] == [None, None]


def counted(prompt: str) -> str:
    """The metadata's line on how many messages there are, up to its count."""
    line = next(x for x in prompt.splitlines() if "previous messages" in x)
    return line.split(" between", 1)[0]


async def test_a_failed_memory_edit_is_a_tool_error_and_changes_nothing(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(
        system,
        memory_blocks=[
            {"label": "human", "value": "Name: Sam"},
            {"label": "rules", "value": "Be kind.", "read_only": True},
            {"label": "tiny", "value": "12345", "limit": 8},
        ],
    )
    llm.push(
        Reply(
            tool_calls=[
                ("memory_replace", {"label": "human", "old_string": "Bob", "new_string": "X"}),
                ("memory_insert", {"label": "rules", "new_string": "Be rude."}),
                ("memory_insert", {"label": "tiny", "new_string": "6789"}),
                ("memory_insert", {"label": "nope", "new_string": "x"}),
            ]
        ),
        Reply(content="Sorry."),
    )
    result = await send(system, agent["id"], "edit things")
    # The step's four results, as one message (as Letta shows a step's results).
    (shown,) = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
    returns = shown["tool_returns"]
    assert [r["status"] for r in returns] == ["error"] * 4
    assert "did not appear" in returns[0]["tool_return"]
    assert "read-only" in returns[1]["tool_return"]
    assert "full" in returns[2]["tool_return"]
    assert "no memory block labelled 'nope'" in returns[3]["tool_return"]
    blocks = {
        b["label"]: b["value"]
        for b in (await system.http.get(f"/v1/agents/{agent['id']}/core-memory/blocks")).json()
    }
    assert blocks == {"human": "Name: Sam", "rules": "Be kind.", "tiny": "12345"}
    # The model was told why, in the tool messages of its next request.
    tool_msgs = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 4


async def test_streaming_with_split_tool_call_arguments(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(
        Reply(
            tool_calls=[
                (
                    "memory_insert",
                    {"label": "human", "new_string": "Prefers long detailed answers " * 3},
                )
            ]
        ),
        Reply(content="Streaming works."),
    )
    async with system.http.stream(
        "POST",
        f"/v1/agents/{agent['id']}/messages/stream",
        json={"messages": [{"role": "user", "content": "stream please"}], "stream_tokens": True},
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = (await response.aread()).decode()
    pieces = [
        d for _, d in parse_sse(raw) if d != "[DONE]" and d["message_type"] == "assistant_message"
    ]
    # Token streaming: the reply came in several chunks, each with the message's id.
    assert len(pieces) > 1 and len({p["id"] for p in pieces}) == 1
    events = merged(parse_sse(raw))
    kinds = [d if d == "[DONE]" else d["message_type"] for _, d in events]
    assert kinds == [
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
        "stop_reason",
        "usage_statistics",
        "[DONE]",
    ]
    call = events[0][1]["tool_call"]
    assert json.loads(call["arguments"])["new_string"].startswith("Prefers long")
    assert events[3][1]["stop_reason"] == "end_turn"
    assert events[4][1]["step_count"] == 2
    assert all(r.get("stream") for r in llm.requests[-2:])
    human = (await system.http.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human")).json()
    assert "Prefers long detailed answers" in human["value"]


async def test_streaming_flag_on_the_messages_route(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="chunked"))
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages",
        json={"messages": [{"role": "user", "content": "hi"}], "streaming": True},
        headers={"Accept": "application/json"},
    )
    events = parse_sse(response.text)
    assert [d if d == "[DONE]" else d["message_type"] for _, d in events] == [
        "assistant_message",
        "stop_reason",
        "usage_statistics",
        "[DONE]",
    ]


async def test_provider_auth_error_ends_the_run_with_llm_api_error(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(status=401, error_message="bad key"))
    result = await send(system, agent["id"], "hello")
    assert result["stop_reason"]["stop_reason"] == "llm_api_error"
    state = (await system.http.get(f"/v1/agents/{agent['id']}")).json()
    assert state["last_stop_reason"] == "llm_api_error"
    run = (await system.http.get(f"/v1/runs/{result['usage']['run_ids'][0]}")).json()
    assert state["last_run_completion"] == run["completed_at"]
    assert state["last_run_duration_ms"] >= 0


async def test_memgpt_agent_replies_through_send_message(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system, agent_type="memgpt_v2_agent")
    llm.push(
        Reply(
            content="thinking about it",
            tool_calls=[("send_message", {"message": "Hi from memgpt"})],
        )
    )
    result = await send(system, agent["id"], "hello")
    assert [
        (m["message_type"], m.get("content") or m.get("reasoning")) for m in result["messages"]
    ] == [("reasoning_message", "thinking about it"), ("assistant_message", "Hi from memgpt")]
    assert result["stop_reason"]["stop_reason"] == "end_turn"


async def test_a_killed_service_is_restarted_and_work_continues(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    for name in ("memory", "executor"):
        restarts = system.supervisor.restart_count(name)
        pids = system.supervisor.pids(name)
        import os

        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        await asyncio.wait_for(system.supervisor.wait_for_restarts(name, restarts + len(pids)), 30)
        assert not set(system.supervisor.pids(name)) & set(pids)
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "after restart"})]),
        Reply(content="done"),
    )
    result = await send(system, agent["id"], "remember this")
    assert result["stop_reason"]["stop_reason"] == "end_turn"
    human = (await system.http.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human")).json()
    assert human["value"].endswith("after restart")


async def test_a_message_edit_is_refused_as_letta_refuses_it(system: System) -> None:
    agent = await new_agent(system)
    message_id = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()[0]["id"]
    edited = await system.http.patch(
        f"/v1/agents/{agent['id']}/messages/{message_id}",
        json={"message_type": "system_message", "content": "changed"},
    )
    assert edited.status_code == 405
    assert edited.json()["detail"].startswith("Message editing is no longer supported.")
    assert "PATCH" not in edited.headers["allow"]
    listed = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    assert listed[0]["content"] != "changed"
