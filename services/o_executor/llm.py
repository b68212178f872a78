"""One LLM call: provider-neutral messages in, one assistant ChatMessage out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import openai

from o_contracts.models import ChatMessage, ToolCall, Usage
from o_executor.providers import Handle, client_for


class LLMError(Exception):
    """The provider failed (auth, exhausted retries, bad response)."""


@dataclass(frozen=True)
class LLMResult:
    content: str | None
    tool_calls: list[ToolCall]
    usage: Usage
    finish_reason: str | None


async def complete(
    handle: Handle,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    stream: bool = False,
    temperature: float | None = None,
) -> LLMResult:
    client = client_for(handle)
    kwargs: dict[str, Any] = {"model": handle.model, "messages": messages}
    if tools:
        kwargs["tools"] = tools
        kwargs["tool_choice"] = "auto"
    if temperature is not None:
        kwargs["temperature"] = temperature
    try:
        if stream:
            return await _complete_streaming(client, kwargs)
        response = await client.chat.completions.create(**kwargs)
    except openai.APIError as exc:
        raise LLMError(f"{handle}: {exc}") from exc
    if not response.choices:
        raise LLMError(f"{handle}: the response has no choices")
    choice = response.choices[0]
    calls = [
        ToolCall(id=tc.id, name=tc.function.name, arguments=tc.function.arguments or "")
        for tc in (choice.message.tool_calls or [])
        if tc.type == "function"
    ]
    usage = response.usage
    return LLMResult(
        content=choice.message.content,
        tool_calls=calls,
        usage=Usage(
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            total_tokens=usage.total_tokens if usage else 0,
        ),
        finish_reason=choice.finish_reason,
    )


async def _complete_streaming(client: openai.AsyncOpenAI, kwargs: dict[str, Any]) -> LLMResult:
    """Assemble a streamed response; tool-call arguments arrive split across chunks."""
    content: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    usage = Usage()
    finish: str | None = None
    stream = await client.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}
    )
    async for chunk in stream:
        if chunk.usage is not None:
            usage = Usage(
                prompt_tokens=chunk.usage.prompt_tokens,
                completion_tokens=chunk.usage.completion_tokens,
                total_tokens=chunk.usage.total_tokens,
            )
        for choice in chunk.choices:
            if choice.finish_reason:
                finish = choice.finish_reason
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
            for tc in delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                if tc.id:
                    slot["id"] = tc.id
                if tc.function and tc.function.name:
                    slot["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    slot["arguments"] += tc.function.arguments
    return LLMResult(
        content="".join(content) or None,
        tool_calls=[ToolCall(**calls[i]) for i in sorted(calls)],
        usage=usage,
        finish_reason=finish,
    )


def to_openai_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content or ""})
        elif m.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": tc.id,
                        "type": "function",
                        "function": {"name": tc.name, "arguments": tc.arguments},
                    }
                    for tc in m.tool_calls
                ]
            out.append(entry)
        else:
            out.append({"role": m.role, "content": m.content or ""})
    return out
