"""Images in messages: sent through the official client, stored, shown to the model in
each provider's shape, and listed back as Letta lists them."""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any

import pytest
from letta_client import BadRequestError, Letta

from tests.e2e.conftest import System
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

# Over 1 MiB as base64: more than one NATS message may carry, so it can only get
# through by the object store.
BIG = os.urandom(800 * 1024)
BIG_B64 = base64.b64encode(BIG).decode()
URL = "https://example.com/ant.jpg"


def image_message(data: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": data},
                },
                {"type": "image", "source": {"type": "url", "url": URL}},
                {"type": "text", "text": "What is in these images?"},
            ],
        }
    ]


def send_and_list(system: System, model: str) -> tuple[Any, list[Any]]:
    client: Letta = system.client()
    agent = client.agents.create(model=model, include_base_tools=False)
    response = client.agents.messages.create(agent.id, messages=image_message(BIG_B64))
    listed = [m for m in client.agents.messages.list(agent.id) if m.message_type == "user_message"]
    return response, listed


def check_listed(listed: list[Any]) -> None:
    # Letta shows a stored image as source type "letta" with its data; a URL as the URL.
    assert len(listed) == 1
    stored, url, text = listed[0].content
    assert stored.type == "image" and stored.source.type == "letta"
    assert stored.source.media_type == "image/png" and stored.source.data == BIG_B64
    assert stored.source.file_id.startswith("file-")
    assert url.source.type == "url" and url.source.url == URL
    assert text.type == "text" and text.text == "What is in these images?"


async def test_an_openai_model_is_shown_base64_and_url_images(
    system: System, llm: FakeOpenAI
) -> None:
    llm.push(Reply(content="An ant."))
    response, listed = await asyncio.to_thread(send_and_list, system, "openai/gpt-4o-mini")
    assert [m.message_type for m in response.messages] == ["assistant_message"]
    user = llm.requests[-1]["messages"][-1]
    assert user == {
        "role": "user",
        "content": [
            {
                "type": "image_url",
                "image_url": {"url": f"data:image/png;base64,{BIG_B64}", "detail": "auto"},
            },
            {"type": "image_url", "image_url": {"url": URL, "detail": "auto"}},
            {"type": "text", "text": "What is in these images?"},
        ],
    }
    check_listed(listed)


async def test_an_anthropic_model_is_shown_base64_and_url_images(
    system: System, claude: FakeAnthropic
) -> None:
    claude.push(Reply(content="An ant."))
    response, listed = await asyncio.to_thread(send_and_list, system, "anthropic/claude-sonnet-5-5")
    assert response.messages[-1].content == "An ant."
    assert claude.requests[-1]["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": BIG_B64},
            },
            {"type": "image", "source": {"type": "url", "url": URL}},
            # (The conversation's last block, marked for Anthropic's prompt cache.)
            {
                "type": "text",
                "text": "What is in these images?",
                "cache_control": {"type": "ephemeral"},
            },
        ],
    }
    check_listed(listed)


def refused(system: System, part: dict[str, Any]) -> tuple[list[BadRequestError], int]:
    client: Letta = system.client()
    agent = client.agents.create(model="openai/gpt-4o-mini")
    before = len(list(client.agents.messages.list(agent.id)))
    errors = []
    for bad in (
        {"type": "base64", "media_type": "image/tiff", "data": BIG_B64[:400]},
        {"type": "base64", "media_type": "image/png", "data": "not base64!"},
        {"type": "url", "url": "file:///etc/passwd"},
    ):
        with pytest.raises(BadRequestError) as caught:
            client.agents.messages.create(
                agent.id,
                messages=[{"role": "user", "content": [part, {"type": "image", "source": bad}]}],
            )
        errors.append(caught.value)
    return errors, len(list(client.agents.messages.list(agent.id))) - before


async def test_bad_images_are_refused_and_nothing_is_recorded(
    system: System, llm: FakeOpenAI
) -> None:
    text = {"type": "text", "text": "look"}
    errors, added = await asyncio.to_thread(refused, system, text)
    details = [e.body["detail"] for e in errors]  # type: ignore[index]
    assert "unsupported image media type 'image/tiff'" in details[0]
    assert "not valid base64" in details[1]
    assert "unsupported image URL scheme 'file'" in details[2]
    assert added == 0 and llm.requests == []


def image_tool_return(system: System, model: str) -> list[Any]:
    client: Letta = system.client()
    agent = client.agents.create(model=model, include_base_tools=False)
    tool = {"name": "get_image", "description": "An image.", "parameters": {"type": "object"}}
    asked = client.agents.messages.create(
        agent.id, messages=[{"role": "user", "content": "get it"}], client_tools=[tool]
    )
    call_id = asked.messages[-1].tool_call.tool_call_id
    parts = [
        {"type": "text", "text": "Here it is:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": BIG_B64}},
    ]
    client.agents.messages.create(
        agent.id,
        messages=[
            {
                "type": "approval",
                "approvals": [{"type": "tool", "tool_call_id": call_id, "tool_return": parts}],
            }
        ],
        client_tools=[tool],
    )
    return [
        m for m in client.agents.messages.list(agent.id) if m.message_type == "tool_return_message"
    ]


async def test_a_client_tools_image_result_reaches_anthropic_as_an_image(
    system: System, claude: FakeAnthropic
) -> None:
    claude.push(Reply(tool_calls=[("get_image", {})]), Reply(content="Seen."))
    returns = await asyncio.to_thread(image_tool_return, system, "anthropic/claude-sonnet-5-5")
    result = claude.requests[-1]["messages"][-1]["content"][0]
    assert result["type"] == "tool_result"
    assert result["content"] == [
        {"type": "text", "text": "Here it is:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": BIG_B64}},
    ]
    # Listed: the text as tool_return, the parts (the image with its data) in tool_returns.
    (listed,) = returns
    assert listed.tool_return == "Here it is:"
    text, image = listed.tool_returns[0].tool_return
    assert text.text == "Here it is:" and image.source.data == BIG_B64


async def test_chat_completions_get_a_placeholder_for_a_tools_image(
    system: System, llm: FakeOpenAI
) -> None:
    # Chat Completions take text only in a tool message (as in Letta: a placeholder).
    llm.push(Reply(tool_calls=[("get_image", {})]), Reply(content="Seen."))
    await asyncio.to_thread(image_tool_return, system, "openai/gpt-4o-mini")
    tool_msg = llm.requests[-1]["messages"][-1]
    assert tool_msg["role"] == "tool"
    assert tool_msg["content"] == "Here it is: [Image omitted]"
