"""A run's timeline from its recorded events: what happened, when, and how long it took.

The runs and steps tables keep totals (tokens, stop reason); what a person debugging a run
wants is the sequence: the input, each LLM call with its model, tokens and finish reason,
each tool call with its result, summaries, and the end. Every one of those is an event in
the log with the time it was recorded, so the timeline is a fold over them, decided here
without I/O (routes/timeline.py reads the events).

Durations are between recorded facts: an LLM call lasts from the run's previous fact (the
run's start, a tool's result, a summary) to its `LLMResponded`, so it includes compiling
the context; a tool call lasts from the `LLMResponded` that asked for it (or its
`ToolCallRequested`, recorded just before a tool with effects runs) to its `ToolReturned`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from o_contracts.base import Message
from o_contracts.events.runs import (
    ContextSummarized,
    LLMResponded,
    RunCancellationRequested,
    RunCompleted,
    RunQueued,
    RunStarted,
    ToolCallRequested,
    ToolReturned,
)

# Text shown of a message in the timeline (the full message is in /v1/runs/{id}/messages).
PREVIEW_CHARS = 200


@dataclass(frozen=True)
class Fact:
    """One of the run's events as the log holds it."""

    seq: int
    at: datetime
    event: Message


def _ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000, 3)


def _preview(text: str | None) -> str | None:
    if text is None:
        return None
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


class _Fold:
    """The timeline as the facts arrive, in log order."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.started_at: datetime | None = None
        self.ended_at: datetime | None = None
        # When the run last recorded something: where its next LLM call starts.
        self.mark: datetime | None = None
        self.tools: dict[str, dict[str, Any]] = {}

    def add(self, fact: Fact) -> None:
        e, at = fact.event, fact.at
        base: dict[str, Any] = {"seq": fact.seq, "at": at.isoformat()}
        if isinstance(e, RunQueued):
            self.entries.append(base | {"kind": "queued"})
        elif isinstance(e, RunStarted):
            self.started_at = self.mark = at
            first = e.messages[0].content if e.messages else None
            self.entries.append(
                base
                | {
                    "kind": "started",
                    "input": _preview(first),
                    "messages": len(e.messages),
                    "model": e.override_model,
                    "version": e.version.model_dump(mode="json") if e.version else None,
                }
            )
        elif isinstance(e, LLMResponded):
            self._llm(base, e, at)
        elif isinstance(e, ToolCallRequested):
            call = self.tools.get(e.tool_call_id)
            if call is not None:
                # The tool itself starts now: the call's time is the tool's alone.
                call["started_at"] = at.isoformat()
                call["_start"] = at
        elif isinstance(e, ToolReturned):
            self._returned(e, at)
        elif isinstance(e, ContextSummarized):
            self.entries.append(
                base
                | {
                    "kind": "summarized",
                    "step_number": e.step_number,
                    "duration_ms": _ms(self.mark, at),
                    "messages_before": e.messages_before,
                    "messages_after": e.messages_after,
                }
            )
            self.mark = at
        elif isinstance(e, RunCancellationRequested):
            self.entries.append(base | {"kind": "cancel_requested"})
        elif isinstance(e, RunCompleted):
            self.ended_at = at
            self.entries.append(
                base
                | {
                    "kind": "completed",
                    "stop_reason": e.stop_reason,
                    "error": e.error,
                    "step_count": e.step_count,
                    "usage": e.usage.model_dump(mode="json"),
                    "duration_ms": _ms(self.started_at, at),
                }
            )

    def _llm(self, base: dict[str, Any], e: LLMResponded, at: datetime) -> None:
        self.entries.append(
            base
            | {
                "kind": "llm_call",
                "step_id": e.step_id,
                "step_number": e.step_number,
                "started_at": self.mark.isoformat() if self.mark else None,
                "duration_ms": _ms(self.mark, at),
                "model": e.model,
                "finish_reason": e.finish_reason,
                "prompt_tokens": e.usage.prompt_tokens,
                "completion_tokens": e.usage.completion_tokens,
                "total_tokens": e.usage.total_tokens,
                "text": _preview(e.message.content),
                "tool_calls": [c.name for c in e.message.tool_calls],
            }
        )
        self.mark = at
        for call in e.message.tool_calls:
            entry: dict[str, Any] = {
                "kind": "tool_call",
                "seq": base["seq"],
                "at": base["at"],
                "step_id": e.step_id,
                "step_number": e.step_number,
                "tool_call_id": call.id,
                "tool_name": call.name,
                "arguments": _preview(call.arguments),
                "started_at": at.isoformat(),
                "ended_at": None,
                "duration_ms": None,
                # Waiting for a person's approval or a client's result, or still running.
                "status": "approval_requested" if e.message.awaiting(call) else "pending",
                "result": None,
                "_start": at,
            }
            self.tools[call.id] = entry
            self.entries.append(entry)

    def _returned(self, e: ToolReturned, at: datetime) -> None:
        call = self.tools.get(e.message.tool_call_id or "")
        if call is None:
            return
        call["ended_at"] = at.isoformat()
        call["duration_ms"] = _ms(call["_start"], at)
        call["status"] = e.message.status or "success"
        call["result"] = _preview(e.message.content)
        self.mark = at

    def result(self) -> dict[str, Any]:
        entries = [{k: v for k, v in e.items() if not k.startswith("_")} for e in self.entries]
        return {
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "duration_ms": _ms(self.started_at, self.ended_at),
            "complete": self.ended_at is not None,
            "entries": entries,
        }


def timeline(run_id: str, facts: Iterable[Fact]) -> dict[str, Any]:
    """The timeline of run `run_id` from events in log order (others' events are skipped)."""
    fold = _Fold()
    for fact in facts:
        if getattr(fact.event, "run_id", None) == run_id:
            fold.add(fact)
    return fold.result()
