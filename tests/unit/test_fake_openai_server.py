"""The fake OpenAI server, exercised through the real ``openai`` SDK."""

from __future__ import annotations

import base64
import json
import math
import struct
from collections.abc import AsyncIterator, Iterator

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.chat import ChatCompletionToolUnionParam

from tests.fakes.openai_server import FakeOpenAI, Reply, fake_embedding

TOOLS: list[ChatCompletionToolUnionParam] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "send_message",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    },
]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def fake(server: FakeOpenAI) -> FakeOpenAI:
    server.reset()
    return server


@pytest.fixture
def client(fake: FakeOpenAI) -> Iterator[OpenAI]:
    # Strict validation: responses must parse into the SDK's pydantic models exactly.
    with OpenAI(
        base_url=fake.base_url, api_key="test", max_retries=0, _strict_response_validation=True
    ) as c:
        yield c


@pytest.fixture
async def aclient(fake: FakeOpenAI) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(
        base_url=fake.base_url, api_key="test", max_retries=0, _strict_response_validation=True
    ) as c:
        yield c


def test_start_binds_ephemeral_port_and_echoes_by_default(fake: FakeOpenAI, client: OpenAI) -> None:
    assert fake.port > 0
    assert fake.base_url == f"http://127.0.0.1:{fake.port}/v1"

    completion = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello there"}]
    )
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "gpt-4o-mini"
    choice = completion.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert choice.message.content == "echo: hello there"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )


def test_plain_reply_raw_shape(fake: FakeOpenAI) -> None:
    fake.push(Reply(content="Hi!", prompt_tokens=11, completion_tokens=2))
    resp = httpx.post(
        f"{fake.base_url}/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hey"}]},
    )
    assert resp.status_code == 200
    assert resp.headers["x-request-id"].startswith("req_")
    body = resp.json()
    assert set(body) >= {"id", "object", "created", "model", "choices", "usage"}
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hi!", "refusal": None, "annotations": []},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    usage = body["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (
        11,
        2,
        13,
    )


async def test_two_tool_calls(fake: FakeOpenAI, aclient: AsyncOpenAI) -> None:
    fake.push(
        Reply(
            tool_calls=[
                ("get_weather", {"city": "Paris"}),
                ("send_message", {"text": "It is sunny in Paris."}),
            ]
        )
    )
    completion = await aclient.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=TOOLS,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 2
    assert [c.id for c in calls] == ["call_1", "call_2"]
    assert all(c.type == "function" for c in calls)
    parsed = [(c.function.name, json.loads(c.function.arguments)) for c in calls]  # type: ignore[union-attr]
    assert parsed == [
        ("get_weather", {"city": "Paris"}),
        ("send_message", {"text": "It is sunny in Paris."}),
    ]


async def test_streaming_reassembles_split_tool_call_arguments(
    fake: FakeOpenAI, aclient: AsyncOpenAI
) -> None:
    long_text = "A fairly long message so that the arguments span several chunks."
    fake.push(
        Reply(
            content="Let me check.",
            tool_calls=[
                ("get_weather", {"city": "Reykjavik"}),
                ("send_message", {"text": long_text}),
            ],
        )
    )
    stream = await aclient.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "go"}],
        tools=TOOLS,
        stream=True,
    )
    content = ""
    calls: dict[int, dict[str, str]] = {}
    deltas_per_call: dict[int, int] = {}
    finish_reasons: list[str] = []
    async for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        assert chunk.usage is None
        for choice in chunk.choices:
            if choice.finish_reason:
                finish_reasons.append(choice.finish_reason)
            content += choice.delta.content or ""
            for tc in choice.delta.tool_calls or ():
                deltas_per_call[tc.index] = deltas_per_call.get(tc.index, 0) + 1
                if tc.index not in calls:
                    # First delta of a call: carries id, type and name.
                    assert tc.id is not None and tc.type == "function"
                    assert tc.function is not None and tc.function.name
                    calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
                else:
                    assert tc.id is None and tc.type is None
                    assert tc.function is not None and tc.function.name is None
                calls[tc.index]["arguments"] += (
                    tc.function.arguments if tc.function else None
                ) or ""

    assert content == "Let me check."
    assert finish_reasons == ["tool_calls"]
    assert [calls[i]["id"] for i in sorted(calls)] == ["call_1", "call_2"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Reykjavik"}
    assert json.loads(calls[1]["arguments"]) == {"text": long_text}
    assert deltas_per_call[0] >= 3 and deltas_per_call[1] >= 3  # header + >=2 argument pieces


def test_streaming_helper_accumulates_final_completion(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.push(Reply(tool_calls=[("get_weather", {"city": "Oslo"})]))
    with client.chat.completions.stream(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "go"}],
        tools=TOOLS,
    ) as stream:
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert calls is not None and len(calls) == 1
    assert calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Oslo"}
    assert final.choices[0].finish_reason == "tool_calls"


def test_streaming_usage_chunk(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.push(Reply(content="streamed words here", prompt_tokens=7, completion_tokens=3))
    chunks = list(
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "go"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    *body, last = chunks
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (
        7,
        3,
        10,
    )
    assert all(c.usage is None for c in body)
    assert body[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in body) == "streamed words here"
    assert body[-1].choices[0].finish_reason == "stop"
    assert len({c.id for c in chunks}) == 1

    # Without include_usage there is no usage chunk.
    plain = list(
        client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "go"}], stream=True
        )
    )
    assert all(c.choices and c.usage is None for c in plain)


def test_sse_wire_format(fake: FakeOpenAI) -> None:
    fake.push(Reply(content="hi"))
    with httpx.stream(
        "POST",
        f"{fake.base_url}/chat/completions",
        json={"model": "m", "messages": [], "stream": True},
    ) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        raw = resp.read().decode()
    events = raw.split("\n\n")
    assert events[-1] == ""
    assert events[-2] == "data: [DONE]"
    assert all(e.startswith("data: {") for e in events[:-2])


async def test_rate_limit_surfaces_as_rate_limit_error(
    fake: FakeOpenAI, aclient: AsyncOpenAI
) -> None:
    fake.push(Reply(status=429))
    with pytest.raises(openai.RateLimitError) as info:
        await aclient.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
    assert info.value.status_code == 429
    assert info.value.code == "rate_limit_exceeded"
    assert info.value.response.headers["retry-after"] == "0"
    assert len(fake.requests) == 1


def test_server_error_then_retry_succeeds(fake: FakeOpenAI) -> None:
    fake.push(Reply(status=500, error_message="boom"))
    with OpenAI(base_url=fake.base_url, api_key="test", max_retries=0) as c:
        with pytest.raises(openai.InternalServerError, match="boom"):
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])

    fake.push(Reply(status=429), Reply(content="after retry"))
    with OpenAI(base_url=fake.base_url, api_key="test", max_retries=1) as c:
        completion = c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    assert completion.choices[0].message.content == "after retry"
    assert len(fake.requests) == 3
    assert fake.pending == 0


async def test_error_mid_stream_event_and_disconnect(
    fake: FakeOpenAI, aclient: AsyncOpenAI
) -> None:
    fake.push(Reply(content="x" * 80, error_mid_stream=True, error_message="stream broke"))
    received = ""
    with pytest.raises(openai.APIError, match="stream broke"):
        stream = await aclient.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
        async for chunk in stream:
            received += chunk.choices[0].delta.content or ""
    assert 0 < len(received) < 80

    fake.push(Reply(content="y" * 80, error_mid_stream=True, mid_stream_error="disconnect"))
    received = ""
    with pytest.raises(openai.APIConnectionError):
        stream = await aclient.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
        async for chunk in stream:
            received += chunk.choices[0].delta.content or ""
    assert 0 < len(received) < 80

    # The server is still healthy afterwards.
    ok = await aclient.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "still here?"}]
    )
    assert ok.choices[0].message.content == "echo: still here?"


def test_malformed_raw_arguments_are_sent_verbatim(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.push(Reply(tool_calls=[("get_weather", {})], raw_arguments='{"city": "Par'))
    completion = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "x"}],
        tools=TOOLS,
    )
    calls = completion.choices[0].message.tool_calls
    assert calls is not None
    assert calls[0].function.arguments == '{"city": "Par'  # type: ignore[union-attr]


def test_default_reply_hook(fake: FakeOpenAI, client: OpenAI) -> None:
    fake.default_reply = lambda body: Reply(content=f"{len(body['messages'])} messages")
    completion = client.chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
    )
    assert completion.choices[0].message.content == "2 messages"
    fake.push(Reply(content="queued wins"))
    completion = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "u"}]
    )
    assert completion.choices[0].message.content == "queued wins"


def test_requests_are_recorded(fake: FakeOpenAI, client: OpenAI) -> None:
    client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "first"}], temperature=0.2
    )
    client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": [{"type": "text", "text": "second"}]}],
        tools=TOOLS,
    )
    assert len(fake.requests) == 2
    assert fake.requests[0]["model"] == "gpt-4o"
    assert fake.requests[0]["temperature"] == 0.2
    assert fake.requests[0]["messages"] == [{"role": "user", "content": "first"}]
    assert fake.requests[1]["tools"] == TOOLS
    fake.reset()
    assert fake.requests == []


@pytest.fixture
def lenient_client(fake: FakeOpenAI) -> Iterator[OpenAI]:
    # base64 embeddings arrive as strings, which strict validation (List[float]) rejects
    # even against the real API, so embedding tests use a default (non-strict) client.
    with OpenAI(base_url=fake.base_url, api_key="test", max_retries=0) as c:
        yield c


def test_embeddings_default_base64(fake: FakeOpenAI, lenient_client: OpenAI) -> None:
    # The SDK asks for base64 by default and decodes it back to floats.
    client = lenient_client
    result = client.embeddings.create(model="text-embedding-3-small", input=["alpha", "beta"])
    assert fake.embedding_requests[-1]["encoding_format"] == "base64"
    assert result.object == "list"
    assert [d.index for d in result.data] == [0, 1]
    first, second = (d.embedding for d in result.data)
    assert len(first) == len(second) == 1536
    assert math.isclose(math.sqrt(sum(v * v for v in first)), 1.0, rel_tol=1e-5)
    assert first == fake_embedding("alpha") and first != second
    assert result.usage.prompt_tokens > 0

    again = client.embeddings.create(model="text-embedding-3-small", input="alpha")
    assert again.data[0].embedding == first  # deterministic


def test_embeddings_dimensions_and_explicit_formats(lenient_client: OpenAI) -> None:
    client = lenient_client
    small = client.embeddings.create(
        model="text-embedding-3-small", input="alpha", dimensions=256, encoding_format="float"
    )
    assert len(small.data[0].embedding) == 256
    assert small.data[0].embedding == fake_embedding("alpha", 256)

    encoded = client.embeddings.create(
        model="text-embedding-3-small", input="alpha", dimensions=64, encoding_format="base64"
    )
    raw = encoded.data[0].embedding
    assert isinstance(raw, str)  # explicit base64: the SDK leaves decoding to the caller
    decoded = list(struct.unpack("<64f", base64.b64decode(raw)))
    assert decoded == fake_embedding("alpha", 64)


def test_embedding_dim_is_configurable() -> None:
    with FakeOpenAI(embedding_dim=32) as fake, OpenAI(base_url=fake.base_url, api_key="t") as c:
        result = c.embeddings.create(model="text-embedding-3-small", input="x")
        assert len(result.data[0].embedding) == 32
    assert not fake.running


def test_models(fake: FakeOpenAI, client: OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert "gpt-4o-mini" in ids and "text-embedding-3-small" in ids
    assert client.models.retrieve("gpt-4o").owned_by == "system"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
