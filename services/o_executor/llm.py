"""One LLM call: provider-neutral messages in, one assistant ChatMessage out, with retries."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from o_contracts.models import ChatMessage, ToolCall, Usage
from o_executor import images
from o_executor.anthropic_format import from_anthropic, to_anthropic, with_cache_marks
from o_executor.llm_telemetry import llm_call
from o_executor.model_settings import (
    DEFAULTS,
    ModelSettings,
    anthropic_params,
    anthropic_tool_choice,
    openai_params,
)
from o_executor.providers import Handle, anthropic_client, config_for, openai_client
from o_runtime import provider_registry
from o_runtime.sdk_imports import api_error, imported

if TYPE_CHECKING:
    import anthropic
    import openai

# The SDKs (openai, anthropic) are imported by the first call that needs one
# (o_runtime/sdk_imports.py says why).

log = logging.getLogger(__name__)

BACKOFF_MAX = 20.0


# Called with each new piece of the answer's text while it streams.
OnText = Callable[[str], Awaitable[None]]
# Called with each new piece of a tool call while it streams: (call id, the tool's
# name on the call's first piece else None, new argument text).
OnToolCall = Callable[[str, str | None, str], Awaitable[None]]


@dataclass(frozen=True)
class Retries:
    """A 429, a 5xx or a dropped connection is tried again `max_retries` times, waiting
    `backoff` * 2^n seconds (or the provider's retry-after) in between
    (O_LLM_MAX_RETRIES, O_LLM_BACKOFF: o_executor/settings.py)."""

    max_retries: int = 3
    backoff: float = 0.5


@dataclass(frozen=True)
class Streamed:
    """Where a streamed answer's pieces go as they arrive (either may be None)."""

    on_text: OnText | None = None
    on_tool_call: OnToolCall | None = None


class LLMError(Exception):
    """The provider failed (auth, exhausted retries, bad response)."""


@dataclass(frozen=True)
class Exchange:
    """The call as the provider saw it, for the step's trace (o_contracts/provider_traces.py):
    the request's body as sent, and the response's, made only when the trace is written."""

    request: dict[str, Any]
    response: Callable[[], dict[str, Any]]


@dataclass(frozen=True)
class LLMResult:
    content: str | None
    tool_calls: list[ToolCall]
    usage: Usage
    finish_reason: str | None
    # Extended thinking (Anthropic): its text and the signature it must be sent back with.
    reasoning: str | None = None
    reasoning_signature: str | None = None
    exchange: Exchange | None = field(default=None, compare=False, repr=False)


def family(handle: Handle) -> str:
    """The tokenizer family of a handle's provider (for offline token estimates)."""
    try:
        return config_for(handle).protocol
    except Exception:
        return "openai"


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    header = response.headers.get("retry-after") if response is not None else None
    try:
        return float(header) if header is not None else None
    except ValueError:
        return None


def _retryable(exc: Exception, sdk_error: type[Exception]) -> bool:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status == 429 or status >= 500
    # Connection failures, timeouts, and errors reported inside a stream.
    return isinstance(exc, sdk_error)


def _describe(handle: Handle, exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    if status in (401, 403):
        return f"{handle}: the provider refused the credentials ({status}): {exc}"
    return f"{handle}: {exc}"


async def complete(
    handle: Handle,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    stream: bool = False,
    settings: ModelSettings = DEFAULTS,
    force_tool: bool = False,
    on_text: OnText | None = None,
    on_tool_call: OnToolCall | None = None,
    retries: Retries = Retries(),
) -> LLMResult:
    # (A provider registered through the API is read afresh: its key may have changed.)
    await provider_registry.ensure(handle.provider)
    config = config_for(handle)
    await imported(config.protocol)
    sdk_error = api_error(config.protocol)
    attempt = 0
    emitted = False
    if on_text is not None:
        forward = on_text

        async def tracked(text: str) -> None:
            nonlocal emitted
            emitted = True
            await forward(text)

        on_text = tracked
    # Tool-call pieces do not stop a retry: they are a preview, and the call the
    # retry records (under its own id) is what the client is sent in full.
    streamed = Streamed(on_text, on_tool_call)
    with llm_call(handle.provider, handle.model) as call:
        while True:
            try:
                if config.protocol == "anthropic":
                    result = await _anthropic(
                        handle, messages, tools, stream, settings, force_tool, streamed
                    )
                else:
                    result = await _openai(
                        handle, messages, tools, stream, settings, force_tool, streamed
                    )
                call.answered(result.usage, result.finish_reason)
                return result
            except sdk_error as exc:
                call.failed_attempt(exc)
                delay = _retry_delay(handle, exc, attempt, retries, emitted, sdk_error)
                attempt += 1
                log.info("%s failed (%s); retry %d in %.2fs", handle, exc, attempt, delay)
                await asyncio.sleep(delay)


def _retry_delay(
    handle: Handle,
    exc: Exception,
    attempt: int,
    retries: Retries,
    emitted: bool,
    sdk_error: type[Exception],
) -> float:
    """How long to wait before trying `attempt` + 1; raises LLMError when it is not tried
    again."""
    # Text already streamed to the client cannot be taken back: a retry would
    # show it twice, so a stream that fails part-way is not retried.
    if not _retryable(exc, sdk_error) or attempt >= retries.max_retries or emitted:
        suffix = f" (after {attempt + 1} attempts)" if attempt else ""
        if emitted:
            suffix += " (failed part-way through a streamed answer)"
        raise LLMError(_describe(handle, exc) + suffix) from exc
    delay: float = min(retries.backoff * 2.0**attempt, BACKOFF_MAX)
    hinted = _retry_after(exc)
    if hinted is not None:
        delay = min(hinted, BACKOFF_MAX)
    return delay


async def _openai(
    handle: Handle,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    stream: bool,
    settings: ModelSettings,
    force_tool: bool,
    streamed: Streamed,
) -> LLMResult:
    from openai.types.chat import ChatCompletion

    client = openai_client(handle.provider)
    kwargs = openai_body(handle, messages, tools, settings, force_tool)
    if stream:
        return await _complete_streaming(client, kwargs, streamed)
    # The SDK's own HTTP client, error mapping and response types, but without
    # chat.completions.create's recursive TypedDict transform of the request,
    # which cost ~16 ms a call on an agent's context (profiled); our payload is
    # already plain JSON of the documented shape.
    response = await client.post("/chat/completions", body=kwargs, cast_to=ChatCompletion)
    if not response.choices:
        raise LLMError(f"{handle}: the response has no choices")
    choice = response.choices[0]
    calls = [
        ToolCall(id=tc.id, name=tc.function.name, arguments=tc.function.arguments or "")
        for tc in (choice.message.tool_calls or [])
        if tc.type == "function"
    ]
    return LLMResult(
        content=choice.message.content,
        tool_calls=calls,
        usage=openai_usage(response.usage),
        finish_reason=choice.finish_reason,
        exchange=Exchange(kwargs, lambda: response.to_dict(mode="json")),
    )


def openai_usage(usage: Any) -> Usage:
    """A Chat Completions response's usage (the SDK's CompletionUsage, or None)."""
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        cached_input_tokens=cached,
    )


def openai_body(
    handle: Handle,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    settings: ModelSettings,
    force_tool: bool,
) -> dict[str, Any]:
    """A Chat Completions request's body (streamed: with OPENAI_STREAM added)."""
    # Anthropic's signed thinking means nothing to an OpenAI-protocol server, and Chat
    # Completions takes only text in a tool message: its images become placeholders.
    wire = [_for_chat_completions(m) for m in messages]
    kwargs: dict[str, Any] = {"model": handle.model, "messages": wire}
    if tools:
        kwargs["tools"] = tools
        kwargs["tool_choice"] = "required" if force_tool else "auto"
    return kwargs | openai_params(settings, handle.model, bool(tools))


# What a streamed Chat Completions request adds (the usage comes in the last chunk).
OPENAI_STREAM: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}


def anthropic_body(
    handle: Handle,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    settings: ModelSettings,
    force_tool: bool,
) -> dict[str, Any]:
    """A Messages API request's body (streamed: with `"stream": true` added)."""
    system, turns, anthropic_tools = with_cache_marks(*to_anthropic(messages, tools))
    kwargs: dict[str, Any] = {"model": handle.model, "messages": turns}
    kwargs |= anthropic_params(settings, handle.model)
    if system:
        kwargs["system"] = system
    if anthropic_tools:
        kwargs["tools"] = anthropic_tools
        kwargs["tool_choice"] = anthropic_tool_choice(settings, force_tool, "thinking" in kwargs)
    return kwargs


async def request_body(
    handle: Handle,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    stream: bool,
    settings: ModelSettings,
    force_tool: bool,
) -> dict[str, Any]:
    """The body `complete` sends its provider for these arguments, built and not sent (a
    run's preview). Raises UnknownProvider."""
    await provider_registry.ensure(handle.provider)
    if config_for(handle).protocol == "anthropic":
        body = anthropic_body(handle, messages, tools, settings, force_tool)
        return body | {"stream": True} if stream else body
    body = openai_body(handle, messages, tools, settings, force_tool)
    return body | OPENAI_STREAM if stream else body


def _for_chat_completions(m: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in m.items() if k != "thinking"}
    if m["role"] == "tool" and isinstance(m.get("content"), list):
        out["content"] = images.text_of(m["content"])
    return out


async def _anthropic(
    handle: Handle,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    stream: bool,
    settings: ModelSettings,
    force_tool: bool,
    streamed: Streamed,
) -> LLMResult:
    import anthropic

    client = anthropic_client(handle.provider)
    kwargs = anthropic_body(handle, messages, tools, settings, force_tool)
    message: anthropic.types.Message
    sent = dict(kwargs)
    if stream:
        # The SDK's stream() no longer names temperature (newer Claude models fix
        # it); the API still takes it for those that do not, so it goes as is.
        if "temperature" in kwargs:
            kwargs["extra_body"] = {"temperature": kwargs.pop("temperature")}
        sent["stream"] = True
        async with client.messages.stream(**kwargs) as events:
            tool_use_ids: dict[int, str] = {}  # content block index -> tool_use id
            async for event in events:
                if event.type == "text" and event.text and streamed.on_text is not None:
                    await streamed.on_text(event.text)
                elif event.type == "content_block_start" and event.content_block.type == "tool_use":
                    tool_use_ids[event.index] = event.content_block.id
                    if streamed.on_tool_call is not None:
                        await streamed.on_tool_call(
                            event.content_block.id, event.content_block.name, ""
                        )
                elif (
                    event.type == "content_block_delta"
                    and event.delta.type == "input_json_delta"
                    and event.delta.partial_json
                    and streamed.on_tool_call is not None
                ):
                    await streamed.on_tool_call(
                        tool_use_ids[event.index], None, event.delta.partial_json
                    )
            message = await events.get_final_message()
    else:
        # As for OpenAI: the SDK's client and types, without its request transform.
        message = await client.post("/v1/messages", body=kwargs, cast_to=anthropic.types.Message)
    answer = from_anthropic(list(message.content))
    # The prompt's tokens are those read from the cache, written to it and neither (as
    # Letta counts them): what the window holds and the token estimates learn from.
    usage = message.usage
    read, written = usage.cache_read_input_tokens, usage.cache_creation_input_tokens
    prompt = usage.input_tokens + (read or 0) + (written or 0)
    completion = usage.output_tokens
    return LLMResult(
        content=answer.text,
        tool_calls=answer.calls,
        usage=Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            cached_input_tokens=read,
            cache_write_tokens=written,
        ),
        finish_reason=message.stop_reason,
        reasoning=answer.thinking,
        reasoning_signature=answer.signature,
        exchange=Exchange(sent, lambda: message.to_dict(mode="json")),
    )


async def _complete_streaming(
    client: openai.AsyncOpenAI, kwargs: dict[str, Any], streamed: Streamed
) -> LLMResult:
    """Assemble a streamed response; tool-call arguments arrive split across chunks."""
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    content: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    announced: set[int] = set()
    usage = Usage()
    finish: str | None = None
    sent = kwargs | OPENAI_STREAM
    last: ChatCompletionChunk | None = None
    stream = await client.post(
        "/chat/completions",
        body=sent,
        cast_to=ChatCompletion,
        stream=True,
        stream_cls=openai.AsyncStream[ChatCompletionChunk],
    )
    async for chunk in stream:
        last = chunk
        if chunk.usage is not None:
            usage = openai_usage(chunk.usage)
        for choice in chunk.choices:
            if choice.finish_reason:
                finish = choice.finish_reason
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
                if streamed.on_text is not None:
                    await streamed.on_text(delta.content)
            for tc in delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                if tc.id:
                    slot["id"] = tc.id
                if tc.function and tc.function.name:
                    slot["name"] += tc.function.name
                piece = (tc.function.arguments if tc.function else None) or ""
                slot["arguments"] += piece
                if streamed.on_tool_call is not None and slot["id"] and slot["name"]:
                    # The first piece with the call's id and name names it; the
                    # rest carry only argument text.
                    first = tc.index not in announced
                    announced.add(tc.index)
                    if first or piece:
                        await streamed.on_tool_call(
                            slot["id"], slot["name"] if first else None, piece
                        )
    result = LLMResult(
        content="".join(content) or None,
        tool_calls=[ToolCall(**calls[i]) for i in sorted(calls)],
        usage=usage,
        finish_reason=finish,
    )
    return replace(result, exchange=Exchange(sent, lambda: _assembled(last, result)))


def _assembled(last: Any, result: LLMResult) -> dict[str, Any]:
    """A streamed answer as the completion it adds up to (what a trace shows of it)."""
    message: dict[str, Any] = {"role": "assistant", "content": result.content}
    if result.tool_calls:
        message["tool_calls"] = wire_calls(result.tool_calls)
    return {
        "id": last.id if last is not None else None,
        "object": "chat.completion",
        "created": last.created if last is not None else None,
        "model": last.model if last is not None else None,
        "choices": [{"index": 0, "message": message, "finish_reason": result.finish_reason}],
        "usage": result.usage.model_dump(),
    }


def wire_calls(calls: list[ToolCall]) -> list[dict[str, Any]]:
    """Tool calls as Chat Completions writes them."""
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in calls
    ]


def to_openai_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            content: str | list[dict[str, Any]] = (
                images.wire_parts(m.parts) if m.parts else m.content or ""
            )
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": content})
        elif m.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.reasoning and m.reasoning_signature:
                entry["thinking"] = {"text": m.reasoning, "signature": m.reasoning_signature}
            if m.tool_calls:
                entry["tool_calls"] = wire_calls(m.tool_calls)
            out.append(entry)
        elif m.parts:
            out.append({"role": m.role, "content": images.wire_parts(m.parts)})
        else:
            out.append({"role": m.role, "content": m.content or ""})
    return out
