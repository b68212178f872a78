"""An agent behind OpenAI's chat completions API, through the official `openai` SDK
(Letta's `POST /v1/chat/completions`: `model` names the agent)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.e2e.conftest import System
from tests.e2e.support import appended_since, log_end, new_agent
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


def sdk(system: System) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{system.base_url}/v1", api_key="test-key", max_retries=0)


def history(system: System, agent_id: str) -> list[tuple[str, Any]]:
    items = system.client().agents.messages.list(agent_id, order="asc").items
    return [(m.message_type, getattr(m, "content", None)) for m in items]


async def test_a_streamed_completion_is_what_the_agent_says(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    # The agent thinks with a tool first: only what it says to the user is the answer.
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})]),
        Reply(content="Noted, you like tea."),
    )
    stream = sdk(system).chat.completions.create(
        model=agent["id"],
        messages=[
            {"role": "system", "content": "ignored: the agent has its own"},
            {"role": "user", "content": "an earlier turn the agent already has"},
            {"role": "assistant", "content": "an earlier answer"},
            {"role": "user", "content": "I like tea."},
        ],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    answer = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].delta.content or "" for c in answer) == "Noted, you like tea."
    assert answer[0].choices[0].delta.role == "assistant"
    assert answer[-1].choices[0].finish_reason == "stop"
    assert [c.choices[0].finish_reason for c in answer[:-1]] == [None] * (len(answer) - 1)
    (usage,) = [c for c in chunks if not c.choices]
    assert usage.usage is not None and usage.usage.total_tokens > 0
    run_id = system.client().runs.list(agent_id=agent["id"]).items[0].id
    assert {c.id for c in chunks} == {f"chatcmpl-{run_id}"}
    assert {c.model for c in chunks} == {"gpt-4o-mini"}
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    # Only the last user message reached the agent (it keeps its own history) ...
    sent = llm.requests[-2]["messages"]
    assert sent[-1]["content"] == "I like tea."
    assert not any("earlier" in str(m.get("content")) for m in sent)
    # ... and the turn is the agent's, as any other: in its history and its memory.
    kinds = [kind for kind, _ in history(system, agent["id"])]
    assert kinds[-4:] == [
        "user_message",
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    human = system.client().agents.blocks.retrieve("human", agent_id=agent["id"])
    assert "Likes: tea" in human.value


async def test_a_completion_without_streaming(system: System, llm: FakeOpenAI) -> None:
    """Letta answers this with a 400 ("set stream=true"); O gives the completion."""
    agent = await new_agent(system)
    llm.push(Reply(content="Hello Sam.", prompt_tokens=11, completion_tokens=3))
    done = sdk(system).chat.completions.create(
        model=agent["id"], messages=[{"role": "user", "content": "hi"}], temperature=0.2
    )
    assert done.object == "chat.completion" and done.id.startswith("chatcmpl-run-")
    assert done.choices[0].message.content == "Hello Sam."
    assert done.choices[0].message.role == "assistant"
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (11, 3)
    assert history(system, agent["id"])[-2:] == [
        ("user_message", "hi"),
        ("assistant_message", "Hello Sam."),
    ]


async def test_text_and_image_parts_reach_the_agent(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="A red pixel."))
    pixel = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0g"
        "AAAABJRU5ErkJggg=="
    )
    done = sdk(system).chat.completions.create(
        model=agent["id"],
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{pixel}"}},
                ],
            }
        ],
    )
    assert done.choices[0].message.content == "A red pixel."
    parts = llm.requests[-1]["messages"][-1]["content"]
    assert parts[0] == {"type": "text", "text": "What is this?"}
    assert parts[1]["type"] == "image_url"
    assert parts[1]["image_url"]["url"] == f"data:image/png;base64,{pixel}"


async def test_a_failed_run_is_an_error_to_the_sdk(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(Reply(status=401, error_message="bad key"))
    stream = sdk(system).chat.completions.create(
        model=agent["id"], messages=[{"role": "user", "content": "hi"}], stream=True
    )
    with pytest.raises(openai.APIError, match="bad key"):
        list(stream)
    llm.push(Reply(status=401, error_message="bad key"))
    with pytest.raises(openai.APIStatusError) as failed:
        sdk(system).chat.completions.create(
            model=agent["id"], messages=[{"role": "user", "content": "hi"}]
        )
    assert failed.value.status_code == 502
    # O's detail, and OpenAI's error object for OpenAI's SDKs to show.
    detail = failed.value.response.json()["detail"]
    assert "llm_api_error" in detail and "bad key" in detail
    assert failed.value.message == f"Error code: 502 - {detail}"


async def test_bad_requests_are_refused_and_append_nothing(system: System) -> None:
    agent = await new_agent(system)
    client = sdk(system)
    start = await log_end(system)
    user = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError, match="should contain an agent ID"):
        client.chat.completions.create(model="gpt-4o", messages=user)  # type: ignore[arg-type]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="agent-00000000-0000-4000-8000-000000000000",
            messages=user,  # type: ignore[arg-type]
        )
    with pytest.raises(openai.BadRequestError, match="No user message"):
        client.chat.completions.create(
            model=agent["id"],
            messages=[{"role": "assistant", "content": "only me"}],
        )
    bad: list[dict[str, Any]] = [
        {"model": agent["id"], "messages": user, "temperature": 3},
        {"model": agent["id"], "messages": user, "top_p": -1},
        {"model": agent["id"], "messages": [{"role": "robot", "content": "hi"}]},
        {"model": agent["id"], "messages": [{"role": "user", "content": 42}]},
        {
            "model": agent["id"],
            "messages": [{"role": "user", "content": [{"type": "input_audio", "x": 1}]}],
        },
        {
            "model": agent["id"],
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x"}}]}
            ],
        },
        {"messages": user},
        {"model": "agent-not-a-uuid", "messages": user},
    ]
    for body in bad:
        answer = await system.http.post("/v1/chat/completions", json=body)
        assert answer.status_code == 422, (body, answer.text)
        assert answer.json()["detail"]
        assert answer.json()["error"]["type"] == "invalid_request_error"
    assert await appended_since(system, start, f"o.evt.agent.{agent['id']}") == []
