"""The body a callback POSTs: Letta's shape, from the run's row and its messages.

Letta sends `{"run_id", "status", "completed_at", "metadata"}`, the run's metadata
holding `result`: the run's messages (as `GET /v1/runs/{id}/messages` lists them,
the first 100), its stop reason and usage, as a LettaResponse. A failed run's
metadata also has its `error`. The body is made once and kept in the delivery's
CallbackScheduled, so every attempt sends the same bytes; a result too large for
the log is sent without its messages (`messages_omitted: true`), which the
receiver can read with `GET /v1/runs/{run_id}/messages`.
"""

from __future__ import annotations

import json
from typing import Any

from o_gateway import render

# The run's messages the body carries, as Letta's get_run_messages reads them.
MAX_MESSAGES = 100
# A body larger than this goes without its messages: it travels in one event.
MAX_BODY_BYTES = 256 * 1024


def body(run: dict[str, Any], messages: list[dict[str, Any]]) -> str:
    """The JSON body for `run` (a runs row, finished) and its rendered `messages`."""
    text = _encoded(run, messages, omitted=False)
    if len(text.encode()) > MAX_BODY_BYTES:
        text = _encoded(run, [], omitted=True)
    return text


def _encoded(run: dict[str, Any], messages: list[dict[str, Any]], *, omitted: bool) -> str:
    result: dict[str, Any] = {
        "messages": messages,
        "stop_reason": render.stop_reason(run["stop_reason"] or "error"),
        "usage": render.usage(run["usage"] or {}, run["step_count"], [run["id"]]),
        "logprobs": None,
        "turns": None,
    }
    if omitted:
        result["messages_omitted"] = True
    metadata: dict[str, Any] = {
        "run_type": "send_message_async" if run["background"] else "send_message",
        "result": result,
    }
    if run.get("error"):
        metadata["error"] = run["error"]
    payload = {
        "run_id": run["id"],
        "status": run["status"],
        "completed_at": render.iso(run["completed_at"]),
        "metadata": metadata,
    }
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str)
