"""The fake Anthropic server against the official SDK: what the executor relies on."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import pytest

from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import Reply


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic()
    server.start()
    yield server
    server.stop()


def client(fake: FakeAnthropic) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="k", base_url=fake.base_url, max_retries=0)


async def test_tool_use_streamed_in_pieces_assembles(fake: FakeAnthropic) -> None:
    fake.push(Reply(content="Let me note that.", tool_calls=[("remember", {"what": "x" * 40})]))
    async with client(fake).messages.stream(
        model="claude-sonnet-5-5",
        max_tokens=100,
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"name": "remember", "input_schema": {"type": "object"}}],
    ) as stream:
        message = await stream.get_final_message()
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "text" and message.content[0].text == "Let me note that."
    tool = message.content[1]
    assert tool.type == "tool_use" and tool.name == "remember" and tool.input == {"what": "x" * 40}
    assert fake.requests[0]["stream"] is True


async def test_plain_reply_usage_and_errors(fake: FakeAnthropic) -> None:
    fake.push(Reply(content="Hello", prompt_tokens=12, completion_tokens=2), Reply(status=429))
    c = client(fake)
    message = await c.messages.create(
        model="claude-haiku-5-5", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    assert message.content[0].text == "Hello"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (12, 2)
    with pytest.raises(anthropic.RateLimitError):
        await c.messages.create(
            model="claude-haiku-5-5", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    models = [m.id async for m in c.models.list()]
    assert models == ["claude-sonnet-5-5", "claude-haiku-5-5"]


async def test_an_error_mid_stream_raises(fake: FakeAnthropic) -> None:
    fake.push(Reply(content="partial answer that breaks", error_mid_stream=True))
    with pytest.raises(anthropic.APIStatusError) as info:
        async with client(fake).messages.stream(
            model="claude-sonnet-5-5", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        ) as stream:
            await stream.get_final_message()
    assert "Overloaded" in json.dumps(info.value.body)
