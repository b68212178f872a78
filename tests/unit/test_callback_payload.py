"""The body a callback sends: Letta's shape, and what a result too large for the log loses."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from o_gateway.callbacks import payload

DONE = datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC)


def run(**extra: Any) -> dict[str, Any]:
    return {
        "id": "run-1",
        "status": "failed",
        "stop_reason": "llm_api_error",
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        "step_count": 1,
        "background": True,
        "error": "401: bad key",
        "completed_at": DONE,
        **extra,
    }


def test_the_body_has_letta_fields_and_the_run_result() -> None:
    message = {"message_type": "user_message", "content": "hi"}
    body = json.loads(payload.body(run(), [message]))
    assert body["run_id"] == "run-1"
    assert body["status"] == "failed"
    assert body["completed_at"] == "2026-01-01T12:00:05+00:00"
    assert body["metadata"]["run_type"] == "send_message_async"
    assert body["metadata"]["error"] == "401: bad key"
    result = body["metadata"]["result"]
    assert result["messages"] == [message]
    assert result["stop_reason"] == {"message_type": "stop_reason", "stop_reason": "llm_api_error"}
    assert (result["usage"]["total_tokens"], result["usage"]["run_ids"]) == (5, ["run-1"])
    assert "messages_omitted" not in result


def test_a_result_too_large_goes_without_its_messages() -> None:
    big = [{"message_type": "assistant_message", "content": "x" * payload.MAX_BODY_BYTES}]
    text = payload.body(run(error=None), big)
    body = json.loads(text)
    assert len(text.encode()) <= payload.MAX_BODY_BYTES
    assert body["metadata"]["result"]["messages"] == []
    assert body["metadata"]["result"]["messages_omitted"] is True
    assert "error" not in body["metadata"]
