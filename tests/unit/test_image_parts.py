"""Image content parts: what the gateway accepts, how the loop shows them to each
provider, and how listings render them."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi import HTTPException

from o_contracts import limits
from o_contracts.models import ChatMessage, ImagePart, TextPart
from o_executor import images, tokens
from o_executor.anthropic_format import to_anthropic
from o_executor.llm import _for_chat_completions, to_openai_messages
from o_gateway import render
from o_gateway.image_parts import ImageData, ImagePartBody

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
PNG_B64 = base64.b64encode(PNG).decode()
SHA = "a" * 64


def part(source: dict[str, Any]) -> ImagePartBody:
    return ImagePartBody.model_validate({"type": "image", "source": source})


def refusal(source: dict[str, Any]) -> HTTPException:
    with pytest.raises(HTTPException) as caught:
        part(source).checked()
    return caught.value


def test_base64_and_data_urls_become_bytes_and_http_urls_stay_urls() -> None:
    b64 = part({"type": "base64", "media_type": "image/jpg", "data": PNG_B64}).checked()
    assert b64 == ImageData(PNG, "image/jpeg", None)  # image/jpg: the name providers take
    url = part({"type": "url", "url": f"data:image/png;base64,{PNG_B64}"}).checked()
    assert url == ImageData(PNG, "image/png", None)
    letta = part({"type": "letta", "file_id": "file-1", "media_type": "image/gif", "data": PNG_B64})
    assert letta.checked() == ImageData(PNG, "image/gif", None)
    assert part({"type": "url", "url": "https://x.test/a.png"}).checked() == ImagePart(
        url="https://x.test/a.png"
    )


def test_bad_images_are_refused_with_letta_status_codes() -> None:
    assert refusal({"type": "url", "url": "file:///etc/passwd"}).status_code == 400
    assert refusal({"type": "url", "url": "data:image/png,raw"}).status_code == 400
    assert (
        refusal({"type": "base64", "media_type": "text/html", "data": PNG_B64}).status_code == 400
    )
    assert refusal({"type": "base64", "media_type": "image/png", "data": "@@@"}).status_code == 400
    assert refusal({"type": "letta", "file_id": "file-1"}).status_code == 400
    big = base64.b64encode(b"\x00" * (limits.MAX_IMAGE_BYTES + 1)).decode()
    too_large = refusal({"type": "base64", "media_type": "image/png", "data": big})
    assert too_large.status_code == 413 and "over the limit" in str(too_large.detail)


def test_image_data_may_be_longer_than_a_text_only_where_images_are() -> None:
    data = "A" * (limits.MAX_TEXT_BYTES + 4)
    body = {"messages": [{"content": [{"type": "image", "source": {"data": data}}]}]}
    limits.check_storable(body, "body", long_texts=limits.IMAGE_DATA_PATHS)
    with pytest.raises(limits.Unstorable, match="over the limit"):
        limits.check_storable(
            {"messages": [{"content": data}]}, "body", long_texts=limits.IMAGE_DATA_PATHS
        )
    with pytest.raises(limits.Unstorable, match="over the limit"):
        limits.check_storable(
            {"input": [{"source": {"data": "A" * (limits.MAX_IMAGE_DATA_CHARS + 1)}}]},
            "body",
            long_texts=limits.IMAGE_DATA_PATHS,
        )


USER = ChatMessage(
    id="message-1",
    role="user",
    content="what is this?",
    parts=[
        ImagePart(sha256=SHA, size=72, media_type="image/png"),
        ImagePart(url="https://x.test/a.png"),
        TextPart(text="what is this?"),
    ],
)
TOOL = ChatMessage(
    id="message-2",
    role="tool",
    tool_call_id="call_1",
    content="Here:",
    parts=[TextPart(text="Here:"), ImagePart(sha256=SHA, media_type="image/png")],
)


def inlined(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    # What inline_images makes of a stored image (the store's read is the integration test's).
    url = f"data:image/png;base64,{PNG_B64}"
    return [
        m
        | {
            "content": [
                {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}
                if p["type"] == images.STORED_IMAGE
                else p
                for p in m["content"]
            ]
        }
        for m in to_openai_messages(messages)
    ]


def test_anthropic_gets_image_blocks_in_user_turns_and_tool_results() -> None:
    _, turns, _ = to_anthropic(inlined([USER, TOOL]), [])
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
    }
    # (One user turn: Anthropic's turns alternate, so the tool result joins it.)
    assert turns[0]["content"][:3] == [
        image,
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
        {"type": "text", "text": "what is this?"},
    ]
    assert turns[0]["content"][3] == {
        "type": "tool_result",
        "tool_use_id": "call_1",
        "content": [{"type": "text", "text": "Here:"}, image],
    }


def test_chat_completions_get_image_parts_for_users_and_placeholders_for_tools() -> None:
    user, tool = (_for_chat_completions(m) for m in inlined([USER, TOOL]))
    assert [p["type"] for p in user["content"]] == ["image_url", "image_url", "text"]
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": "Here: [Image omitted]"}


def test_images_count_in_context_estimates() -> None:
    wire = to_openai_messages([USER])
    estimate = tokens.estimate_request("", wire, [], "openai")
    assert estimate >= 2 * images.IMAGE_TOKENS


def test_listings_show_stored_images_as_letta_images_with_their_data() -> None:
    (listed,) = render.letta_messages(
        USER, datetime.now(UTC), None, None, "letta_v1_agent", images={SHA: PNG_B64}
    )
    stored, url, text = listed["content"]
    assert stored["source"]["type"] == "letta" and stored["source"]["data"] == PNG_B64
    assert stored["source"]["file_id"].startswith("file-")
    assert url == {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}
    assert text["text"] == "what is this?"
