"""OpenAI-shaped chat messages and tools to the Anthropic Messages API, and its answer back.

The loop keeps one neutral message shape (OpenAI's); only this module knows
Anthropic's: the system prompt is a parameter, tool calls are `tool_use`
blocks, tool results are `tool_result` blocks in a user turn, and turns must
alternate (consecutive same-role turns are merged).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from o_contracts.models import ToolCall


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        # The model sent broken JSON earlier; show it as-is rather than fail the run.
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_value": value}


def _image(image_url: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI `image_url` as an Anthropic image block: a data URL as base64, else a URL."""
    url: str = image_url["url"]
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        media_type = header[len("data:") :].split(";")[0]
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
    return {"type": "image", "source": {"type": "url", "url": url}}


def _blocks(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI content parts (text, image_url) as Anthropic content blocks."""
    return [
        _image(p["image_url"])
        if p.get("type") == "image_url"
        else {"type": "text", "text": p["text"]}
        for p in parts
        if p.get("type") == "image_url" or p.get("text")
    ]


def to_anthropic(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """(system, messages, tools) for `client.messages.create`."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for m in messages:
        role = m["role"]
        if role == "system":
            system.append(m.get("content") or "")
        elif role == "tool":
            content = m.get("content") or ""
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": m["tool_call_id"],
                        # A client's result with images: Anthropic shows them to the model.
                        "content": _blocks(content) if isinstance(content, list) else content,
                    }
                ],
            )
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            thinking = m.get("thinking")
            if thinking:
                # With thinking on, Anthropic wants an assistant turn's thinking back, signed,
                # before its tool calls.
                blocks.append(
                    {
                        "type": "thinking",
                        "thinking": thinking["text"],
                        "signature": thinking["signature"],
                    }
                )
            if m.get("content"):
                blocks.append({"type": "text", "text": m["content"]})
            for tc in m.get("tool_calls") or []:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": tc["id"],
                        "name": tc["function"]["name"],
                        "input": _arguments(tc["function"]["arguments"]),
                    }
                )
            if blocks:
                add("assistant", blocks)
        else:
            content = m.get("content") or ""
            if isinstance(content, list):
                add("user", _blocks(content))
            else:
                add("user", [{"type": "text", "text": content}])
    anthropic_tools = [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "input_schema": t["function"].get("parameters") or {"type": "object"},
        }
        for t in tools
    ]
    return "\n\n".join(system), turns, anthropic_tools


# Anthropic caches a request's prefix up to a block marked so (up to four marks); a later
# request with the same prefix reads it at a tenth of the price and sooner.
EPHEMERAL = {"type": "ephemeral"}
# Blocks that may not carry a mark.
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def with_cache_marks(
    system: str, turns: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]] | str, list[dict[str, Any]], list[dict[str, Any]]]:
    """The request marked for Anthropic's prompt cache as Letta marks it: the tools' last,
    the system prompt, and the last block of the last turn (so the conversation so far is
    read from the cache by the next step or turn, which only adds to it). The system prompt
    stays the same until memory changes (run/system_prompts.py), so it and the tools before
    it are read from the cache until then. New lists; the arguments are not changed."""
    marked_tools = [*tools[:-1], tools[-1] | {"cache_control": EPHEMERAL}] if tools else tools
    marked_system: list[dict[str, Any]] | str = (
        [{"type": "text", "text": system, "cache_control": EPHEMERAL}] if system else system
    )
    marked_turns = list(turns)
    if turns and turns[-1]["content"]:
        last = turns[-1]["content"][-1]
        empty_text = last.get("type") == "text" and not last.get("text")
        if last.get("type") not in _UNMARKABLE and not empty_text:
            content = [*turns[-1]["content"][:-1], last | {"cache_control": EPHEMERAL}]
            marked_turns[-1] = turns[-1] | {"content": content}
    return marked_system, marked_turns, marked_tools


@dataclass(frozen=True)
class AnthropicAnswer:
    text: str | None
    calls: list[ToolCall] = field(default_factory=list)
    thinking: str | None = None
    signature: str | None = None


def from_anthropic(content: list[Any]) -> AnthropicAnswer:
    """Text, tool calls and thinking of an Anthropic response's content blocks."""
    text: list[str] = []
    calls: list[ToolCall] = []
    thoughts: list[str] = []
    signature: str | None = None
    for block in content:
        if block.type == "text":
            text.append(block.text)
        elif block.type == "tool_use":
            calls.append(ToolCall(id=block.id, name=block.name, arguments=json.dumps(block.input)))
        elif block.type == "thinking":
            thoughts.append(block.thinking)
            signature = block.signature
    return AnthropicAnswer(
        text="".join(text) or None,
        calls=calls,
        thinking="".join(thoughts) or None,
        signature=signature,
    )
