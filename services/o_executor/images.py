"""Images in the loop's messages: content parts in the neutral (OpenAI) shape, and the
stored images' bytes put in just before the provider is asked.

The loop's wire messages name a stored image by its SHA-256 (a part of type
`o_stored_image`): they are built, measured and summarized often, and an image's
bytes are only needed by the request that goes out. `as_sent` (LiveDeps.complete, a preview)
swaps those parts for OpenAI `image_url` parts with a data URL; a URL image is such a
part from the start. anthropic_format.py turns either into an Anthropic `image` block.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from o_contracts.models import ContentPart, TextPart
from o_runtime.images import ImageMissing, Images

log = logging.getLogger(__name__)

STORED_IMAGE = "o_stored_image"
# What a model is told of an image it cannot be shown (Letta's words).
OMITTED = "[Image omitted]"
# A stored image that is no longer in the store (never expected: images are kept).
UNAVAILABLE = "[Image unavailable]"
# Tokens an image is counted as in context estimates: about what Anthropic and OpenAI
# charge for an image of ~1 megapixel (providers scale larger ones down to that).
IMAGE_TOKENS = 1600


def wire_parts(parts: list[ContentPart]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        elif p.sha256 is not None:
            out.append(
                {
                    "type": STORED_IMAGE,
                    "sha256": p.sha256,
                    "media_type": p.media_type,
                    "detail": p.detail,
                }
            )
        else:
            out.append({"type": "image_url", "image_url": {"url": p.url, "detail": "auto"}})
    return out


def has_stored_images(messages: list[dict[str, Any]]) -> bool:
    return any(
        isinstance(m.get("content"), list)
        and any(part.get("type") == STORED_IMAGE for part in m["content"])
        for m in messages
    )


async def as_sent(
    store: Callable[[], Awaitable[Images]], messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`messages` as their provider is sent them: stored images inlined (the store opened
    only if there is one)."""
    if not has_stored_images(messages):
        return messages
    return await inline_images(await store(), messages)


async def inline_images(images: Images, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with each stored image as an `image_url` part holding its data."""
    out: list[dict[str, Any]] = []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list):
            out.append(m)
            continue
        parts: list[dict[str, Any]] = []
        for part in content:
            if part.get("type") != STORED_IMAGE:
                parts.append(part)
                continue
            try:
                data = await images.get(part["sha256"])
            except ImageMissing:
                log.error("image %s is not in the object store", part["sha256"])
                parts.append({"type": "text", "text": UNAVAILABLE})
                continue
            url = f"data:{part['media_type']};base64,{base64.b64encode(data).decode('ascii')}"
            parts.append(
                {"type": "image_url", "image_url": {"url": url, "detail": part["detail"] or "auto"}}
            )
        out.append(m | {"content": parts})
    return out


def text_of(content: list[dict[str, Any]]) -> str:
    """Parts as text, images as placeholders: a tool result for Chat Completions, whose
    tool messages hold text only (as Letta does)."""
    text = "\n".join(p["text"] for p in content if p.get("type") == "text" and p["text"])
    count = sum(1 for p in content if p.get("type") != "text")
    if count:
        placeholder = OMITTED if count == 1 else f"[{count} images omitted]"
        text = f"{text} {placeholder}" if text else placeholder
    return text


def image_count(content: list[dict[str, Any]]) -> int:
    return sum(1 for p in content if p.get("type") != "text")
