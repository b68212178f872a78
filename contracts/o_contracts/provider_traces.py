"""A step's exchange with its model provider: the request as sent, the response as
received (Letta's provider traces, `GET /v1/steps/{step_id}/trace`).

Diagnostics, not state: the executor puts one per step into a key-value bucket of its own
(`subjects.PROVIDER_TRACES_BUCKET`, key = the step's id) beside the log, never into it, and
the bucket forgets them after a while (docs/observability.md). Stored as zlib-compressed
JSON: a request holds the whole prompt, which compresses several times over.
"""

from __future__ import annotations

import zlib
from typing import Any, Literal

from pydantic import BaseModel

from o_contracts.limits import NATS_MAX_PAYLOAD

# What one trace may take in the bucket: a message's limit, less room for its headers.
MAX_STORED_BYTES = NATS_MAX_PAYLOAD - 4096


class ProviderTrace(BaseModel):
    """Letta's ProviderTrace, with the fields an O server can fill."""

    id: str
    step_id: str
    run_id: str
    agent_id: str
    call_type: Literal["agent_step"] = "agent_step"
    request_json: dict[str, Any]
    response_json: dict[str, Any]
    # The model the step asked: its handle, provider and name.
    llm_config: dict[str, Any]
    source: str = "o-executor"
    created_at: str

    def encode(self) -> bytes:
        """The stored value. A trace too large to keep keeps a note of the sizes in place
        of its request (the prompt: most of it), then of its response too."""
        stored = _compressed(self)
        if len(stored) <= MAX_STORED_BYTES:
            return stored
        sizes = {
            part: len(_compressed(self, include={part}))
            for part in ("request_json", "response_json")
        }
        trimmed = self
        for part in ("request_json", "response_json"):
            trimmed = trimmed.model_copy(update={part: _omitted(sizes[part])})
            stored = _compressed(trimmed)
            if len(stored) <= MAX_STORED_BYTES:
                break
        return stored

    @classmethod
    def decode(cls, stored: bytes) -> ProviderTrace:
        return cls.model_validate_json(zlib.decompress(stored))


def _compressed(trace: ProviderTrace, include: set[str] | None = None) -> bytes:
    return zlib.compress(trace.model_dump_json(include=include).encode(), 1)


def _omitted(compressed_bytes: int) -> dict[str, Any]:
    return {
        "omitted": "too large to keep as a trace",
        "compressed_bytes": compressed_bytes,
        "limit_bytes": MAX_STORED_BYTES,
    }
