"""Why a run ended: Letta's stop reasons, as the run records them in RunCompleted."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class StopReason(StrEnum):
    END_TURN = "end_turn"
    MAX_STEPS = "max_steps"
    TOOL_RULE = "tool_rule"
    REQUIRES_APPROVAL = "requires_approval"
    CANCELLED = "cancelled"
    LLM_API_ERROR = "llm_api_error"
    CONTEXT_OVERFLOW = "context_window_overflow_in_system_prompt"
    ERROR = "error"


@dataclass(frozen=True)
class Stopped:
    """How the run's steps ended, and the error a failed run records."""

    reason: StopReason
    error: str | None = None
