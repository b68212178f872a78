"""Under Letta's otids only the same request, sent the same way, is a retry
(o_gateway/idempotency.py); an Idempotency-Key is the key alone."""

from __future__ import annotations

from typing import Any

from o_gateway.idempotency import request_digest, request_key
from o_gateway.schemas import SendMessageBody

ASK = {"role": "user", "content": "What is the code?", "otid": "otid-1"}


def digest(delivery: str = "json", **body: Any) -> str:
    return request_digest(SendMessageBody.model_validate({"messages": [ASK]} | body), delivery)


def test_the_same_request_has_the_same_digest() -> None:
    assert digest() == digest()
    # A field sent with its default is the request that leaves it out.
    assert digest(max_steps=50, use_assistant_message=True) == digest()
    # `streaming: true` on the plain route is a stream, as the stream route is.
    assert digest("stream", streaming=True) == digest("stream")


def test_what_a_request_asks_or_how_it_is_answered_makes_another_request() -> None:
    other_text = request_digest(
        SendMessageBody.model_validate({"messages": [ASK | {"content": "Another"}]}), "json"
    )
    assert len({digest(), other_text, digest("stream"), digest("async")}) == 4
    assert digest("stream", stream_tokens=True) != digest("stream")
    assert digest(max_steps=3) != digest()


def test_an_otid_key_carries_the_digest_and_a_header_key_does_not() -> None:
    assert request_key(None, ["o-1", "o-2"], "d1") == "otid:o-1\no-2\nd1"
    assert request_key(None, ["o-1", None], "d1") is None  # every message needs one
    assert request_key("k-1", ["o-1"], "d1") == request_key("k-1", ["o-1"], "d2") == "key:k-1"
