"""OpenAI's chat completions in and out of Letta's shapes (o_gateway/chat_completions.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from fastapi import HTTPException

from o_gateway.chat_completions import (
    ChatCompletionBody,
    ChunkStream,
    completion,
    user_content,
    user_message,
)
from o_gateway.image_parts import Base64Source, ImagePartBody, UrlSource
from o_gateway.schemas import TextPart


def body(*messages: dict[str, object]) -> ChatCompletionBody:
    return ChatCompletionBody.model_validate({"model": "agent-1", "messages": list(messages)})


def test_only_the_last_user_message_goes_to_the_agent() -> None:
    sent = user_message(
        body(
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "answer"},
            {"role": "user", "content": "second"},
            {"role": "tool", "content": "a tool's result", "tool_call_id": "c1"},
        )
    )
    assert (sent.role, sent.content) == ("user", "second")
    with pytest.raises(HTTPException) as refused:
        user_message(body({"role": "system", "content": "only instructions"}))
    assert refused.value.status_code == 400


def test_parts_become_letta_parts() -> None:
    parts = user_content(
        [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        ]
    )
    assert isinstance(parts, list)
    text, inline, linked = parts
    assert text == TextPart(text="look")
    assert isinstance(inline, ImagePartBody) and isinstance(inline.source, Base64Source)
    assert (inline.source.media_type, inline.source.data) == ("image/png", "AAAA")
    assert isinstance(linked, ImagePartBody) and isinstance(linked.source, UrlSource)
    assert user_content(None) == ""
    for bad in (
        42,
        [{"type": "input_audio"}],
        [{"type": "image_url", "image_url": {"url": "data:x"}}],
    ):
        with pytest.raises(HTTPException) as refused:
            user_content(bad)
        assert refused.value.status_code == 422


async def _letta(*chunks: dict[str, object] | str) -> AsyncIterator[bytes]:
    for chunk in chunks:
        payload = chunk if isinstance(chunk, str) else json.dumps(chunk)
        yield f"data: {payload}\n\n".encode()


async def _out(stream: ChunkStream, *chunks: dict[str, object] | str) -> list[str]:
    return [piece.decode() async for piece in stream.transform(_letta(*chunks))]


async def test_a_run_streams_as_openai_chunks() -> None:
    run = "run-1"
    out = await _out(
        ChunkStream("gpt-x", include_usage=True),
        {"message_type": "reasoning_message", "run_id": run, "reasoning": "hm"},
        {"message_type": "assistant_message", "run_id": run, "content": "Hel"},
        {"message_type": "ping"},
        {"message_type": "assistant_message", "run_id": run, "content": [{"text": "lo"}]},
        {"message_type": "tool_call_message", "run_id": run},
        {"message_type": "stop_reason", "stop_reason": "end_turn"},
        {
            "message_type": "usage_statistics",
            "prompt_tokens": 5,
            "completion_tokens": 2,
            "total_tokens": 7,
        },
        "[DONE]",
    )
    assert out[1] == ": ping\n\n" and out[-1] == "data: [DONE]\n\n"
    chunks = [json.loads(p[len("data: ") :]) for p in out if p.startswith("data: {")]
    assert [c["choices"][0]["delta"] if c["choices"] else None for c in chunks] == [
        {"role": "assistant", "content": "Hel"},
        {"content": "lo"},
        {},
        None,
    ]
    assert chunks[2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[3]["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    assert {c["id"] for c in chunks} == {"chatcmpl-run-1"}
    assert {c["model"] for c in chunks} == {"gpt-x"}


async def test_a_failed_run_ends_with_an_error_and_no_stop() -> None:
    out = await _out(
        ChunkStream("gpt-x"),
        {
            "message_type": "error_message",
            "run_id": "run-2",
            "error_type": "llm_api_error",
            "message": "bad key",
        },
        {"message_type": "stop_reason", "stop_reason": "llm_api_error"},
        {"message_type": "usage_statistics", "total_tokens": 0},
        "[DONE]",
    )
    assert out == [
        'data: {"error": {"message": "bad key", "type": "llm_api_error"}}\n\n',
        "data: [DONE]\n\n",
    ]


def test_a_reply_as_a_completion() -> None:
    reply = {
        "messages": [
            {"message_type": "tool_call_message"},
            {"message_type": "assistant_message", "content": "Hi"},
            {"message_type": "assistant_message", "content": " there"},
        ],
        "usage": {
            "run_ids": ["run-3"],
            "prompt_tokens": 3,
            "completion_tokens": 1,
            "total_tokens": 4,
        },
    }
    done = completion("gpt-x", reply)
    assert done["id"] == "chatcmpl-run-3" and done["object"] == "chat.completion"
    assert done["choices"][0]["message"] == {"role": "assistant", "content": "Hi there"}
    assert done["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
