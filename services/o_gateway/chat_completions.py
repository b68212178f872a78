"""An agent behind OpenAI's chat completions API (Letta's `POST /v1/chat/completions`).

`model` names the agent; the agent keeps its own history, so of the request's messages
only the last user message is sent to it (as Letta). The answer is what the agent says to
the user (its assistant messages), as OpenAI's chunks or completion; its reasoning and
tool calls stay in the agent's history. Decisions only: the route is
routes/chat_completions.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field

from o_gateway.image_parts import Base64Source, ImagePartBody, UrlSource
from o_gateway.schemas import Content, MessageCreateBody, Name, Text, TextPart

# OpenAI's roles; a message of any of them may come (a client sends its whole history).
Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class _OpenAIBody(BaseModel):
    # OpenAI's SDK sends fields this API has no use for (stream_options, seed...): ignored.
    model_config = ConfigDict(extra="ignore")


class ImageUrl(_OpenAIBody):
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class OpenAITextPart(_OpenAIBody):
    type: Literal["text"]
    text: Text


class OpenAIImagePart(_OpenAIBody):
    type: Literal["image_url"]
    image_url: ImageUrl


OpenAIPart = Annotated[OpenAITextPart | OpenAIImagePart, Field(discriminator="type")]


class ChatMessageIn(_OpenAIBody):
    role: Role
    # Only the last user message's content is read (and checked: `user_content`).
    content: Any = None


class StreamOptions(_OpenAIBody):
    include_usage: bool = False


class ChatCompletionBody(_OpenAIBody):
    """Letta's ChatCompletionRequest: OpenAI's fields and bounds. The sampling fields are
    accepted and, as in Letta, not applied: the agent's own model settings are."""

    model: Name
    messages: list[ChatMessageIn]
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    n: int | None = Field(default=1, ge=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    max_tokens: int | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    user: str | None = None


def agent_of(body: ChatCompletionBody) -> str:
    if not body.model.startswith("agent-"):
        raise HTTPException(
            400,
            "For this endpoint, the 'model' field should contain an agent ID"
            f" (format: 'agent-...'). Received: '{body.model}'",
        )
    return body.model


def user_message(body: ChatCompletionBody) -> MessageCreateBody:
    """The last user message, as a Letta message for the agent (400 if there is none)."""
    last = next((m for m in reversed(body.messages) if m.role == "user"), None)
    if last is None:
        raise HTTPException(
            400,
            "No user message found in the request."
            " Please include at least one message with role='user'.",
        )
    return MessageCreateBody(role="user", content=user_content(last.content))


def user_content(content: Any) -> Content:
    """OpenAI's content (text, or text and image_url parts) as Letta's."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise HTTPException(422, "a message's content is text or a list of content parts")
    parts: list[TextPart | ImagePartBody] = []
    for raw in content:
        part = _part(raw)
        if isinstance(part, OpenAITextPart):
            parts.append(TextPart(text=part.text))
        else:
            parts.append(ImagePartBody(type="image", source=_image_source(part.image_url)))
    return parts


def _part(raw: Any) -> OpenAITextPart | OpenAIImagePart:
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "text":
        return OpenAITextPart.model_validate(raw)
    if kind == "image_url":
        return OpenAIImagePart.model_validate(raw)
    raise HTTPException(
        422, f"content part type {kind!r} is not supported here (text and image_url are)"
    )


def _image_source(image: ImageUrl) -> Base64Source | UrlSource:
    # A data URL carries its bytes; any other URL is fetched as Letta's url source is.
    if image.url.startswith("data:"):
        header, sep, data = image.url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if not sep or encoding != "base64":
            raise HTTPException(422, "an image data URL must be base64 (data:<type>;base64,...)")
        return Base64Source.model_validate(
            {"type": "base64", "media_type": media_type, "data": data, "detail": image.detail}
        )
    return UrlSource(type="url", url=image.url)


def said(messages: list[dict[str, Any]]) -> str:
    """What the agent said to the user in a run's Letta messages."""
    return "".join(
        _text(m.get("content")) for m in messages if m.get("message_type") == "assistant_message"
    )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _usage(letta: dict[str, Any]) -> dict[str, int]:
    return {
        "prompt_tokens": letta.get("prompt_tokens") or 0,
        "completion_tokens": letta.get("completion_tokens") or 0,
        "total_tokens": letta.get("total_tokens") or 0,
    }


def completion(model: str, reply: dict[str, Any]) -> dict[str, Any]:
    """A run's reply (messages, stop reason, usage) as OpenAI's ChatCompletion."""
    run_ids = reply["usage"].get("run_ids") or [""]
    return {
        "id": f"chatcmpl-{run_ids[0]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": said(reply["messages"])},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": _usage(reply["usage"]),
    }


@dataclass
class ChunkStream:
    """Letta's stream of a run (SSE lines of its chunks) as OpenAI's chunk stream.

    The agent's words go out as they come (the run is streamed with tokens); the end is an
    empty delta with finish_reason "stop" (and a usage chunk when asked), then [DONE]. A
    run that fails ends with OpenAI's error object, which OpenAI's SDKs raise; pings stay
    pings, as SSE comments every client skips.
    """

    model: str
    include_usage: bool = False
    created: int = field(default_factory=lambda: int(time.time()))
    completion_id: str = "chatcmpl-"
    _first: bool = True
    _failed: bool = False

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    def on_letta(self, letta: dict[str, Any]) -> list[bytes]:
        kind = letta.get("message_type")
        if letta.get("run_id") and self.completion_id == "chatcmpl-":
            self.completion_id = f"chatcmpl-{letta['run_id']}"
        if kind == "assistant_message":
            text = _text(letta.get("content"))
            if not text:
                return []
            delta: dict[str, Any] = {"content": text}
            if self._first:
                delta = {"role": "assistant", "content": text}
                self._first = False
            return [_data(self.chunk(delta))]
        if kind == "ping":
            return [b": ping\n\n"]
        if kind == "error_message":
            self._failed = True
            error = {"message": letta.get("message"), "type": letta.get("error_type")}
            return [_data({"error": error})]
        if kind == "stop_reason" and not self._failed:
            return [_data(self.chunk({}, "stop"))]
        if kind == "usage_statistics" and self.include_usage:
            return [_data(self.chunk({}) | {"choices": [], "usage": _usage(letta)})]
        return []

    async def transform(self, letta_stream: AsyncIterator[bytes | str]) -> AsyncIterator[bytes]:
        async for raw in letta_stream:
            text = raw.decode() if isinstance(raw, bytes) else raw
            for line in text.splitlines():
                if not line.startswith("data: "):
                    continue
                payload = line[len("data: ") :]
                if payload == "[DONE]":
                    yield b"data: [DONE]\n\n"
                    continue
                for piece in self.on_letta(json.loads(payload)):
                    yield piece


def _data(value: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(value)}\n\n".encode()
