"""Token counts that work offline, per provider family.

No tokenizer files are needed (tiktoken would download its encodings at first
use): counts are estimated from the text (OpenAI-family BPE averages about 4
bytes a token, Anthropic's about 3.5 characters) and then calibrated against
what the provider itself reported for the run's previous request, so the
estimate tracks the real tokenizer closely where it matters: near the limit.
"""

from __future__ import annotations

import json
import math
from typing import Any

from o_executor.images import IMAGE_TOKENS, image_count

# Per-message framing the chat templates add (role markers, separators).
MESSAGE_OVERHEAD = 4


def estimate_text(text: str, family: str) -> int:
    if not text:
        return 0
    if family == "anthropic":
        return math.ceil(len(text) / 3.5)
    return math.ceil(len(text.encode()) / 4)


def estimate_request(
    system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], family: str
) -> int:
    total = estimate_text(system, family) + MESSAGE_OVERHEAD
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):  # text and images (o_executor/images.py)
            total += MESSAGE_OVERHEAD + IMAGE_TOKENS * image_count(content)
            text = [p["text"] for p in content if p.get("type") == "text"]
            total += estimate_text("".join(text), family)
        else:
            total += MESSAGE_OVERHEAD + estimate_text(content, family)
        for tc in m.get("tool_calls") or []:
            total += estimate_text(json.dumps(tc), family)
    if tools:
        total += estimate_text(json.dumps(tools), family)
    return total


class Calibrated:
    """Scales estimates by what the provider reported for the last request it answered."""

    def __init__(self) -> None:
        self.ratio = 1.0

    def learn(self, estimated: int, reported: int) -> None:
        if estimated > 0 and reported > 0:
            self.ratio = min(max(reported / estimated, 0.5), 2.0)

    def __call__(self, estimated: int) -> int:
        return math.ceil(estimated * self.ratio)
