"""A run's timeline (o_gateway/run_timeline.py) folded from its recorded events: LLM calls
and tool calls with their durations, tokens, the stop reason; other runs' events ignored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from o_contracts.events.runs import (
    LLMResponded,
    RunCompleted,
    RunStarted,
    ToolCallRequested,
    ToolReturned,
)
from o_contracts.models import ChatMessage, ToolCall, Usage
from o_gateway.run_timeline import PREVIEW_CHARS, Fact, timeline

T0 = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
RUN = "run-00000000-0000-0000-0000-000000000001"
AGENT = "agent-00000000-0000-0000-0000-000000000001"


def at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def started(run_id: str = RUN) -> RunStarted:
    user = ChatMessage(id="message-u", role="user", content="Remember that I like tea")
    return RunStarted(run_id=run_id, agent_id=AGENT, messages=[user], max_steps=10)


def asked_for_tool() -> LLMResponded:
    call = ToolCall(id="call_1", name="memory_insert", arguments='{"label": "human"}')
    message = ChatMessage(id="message-a1", role="assistant", tool_calls=[call])
    return LLMResponded(
        run_id=RUN,
        agent_id=AGENT,
        step_id="step-1",
        step_number=1,
        message=message,
        usage=Usage(prompt_tokens=100, completion_tokens=20, total_tokens=120),
        model="openai/gpt-4o-mini",
        finish_reason="tool_calls",
    )


def tool_returned(status: str = "success") -> ToolReturned:
    message = ChatMessage(
        id="message-t1", role="tool", tool_call_id="call_1", content="ok", status=status
    )
    return ToolReturned(run_id=RUN, agent_id=AGENT, step_id="step-1", message=message)


def answered() -> LLMResponded:
    message = ChatMessage(id="message-a2", role="assistant", content="Noted: tea.")
    return LLMResponded(
        run_id=RUN,
        agent_id=AGENT,
        step_id="step-2",
        step_number=2,
        message=message,
        usage=Usage(prompt_tokens=130, completion_tokens=5, total_tokens=135),
        model="openai/gpt-4o-mini",
        finish_reason="stop",
    )


def completed() -> RunCompleted:
    usage = Usage(prompt_tokens=230, completion_tokens=25, total_tokens=255)
    return RunCompleted(
        run_id=RUN, agent_id=AGENT, stop_reason="end_turn", usage=usage, step_count=2
    )


def test_a_two_step_run_shows_each_call_with_its_duration_and_tokens() -> None:
    facts = [
        Fact(10, at(0), started()),
        Fact(11, at(40), asked_for_tool()),
        Fact(12, at(55), tool_returned()),
        Fact(13, at(85), answered()),
        Fact(14, at(90), completed()),
    ]
    result = timeline(RUN, facts)
    kinds = [(e["kind"], e["seq"]) for e in result["entries"]]
    assert kinds == [
        ("started", 10),
        ("llm_call", 11),
        ("tool_call", 11),
        ("llm_call", 13),
        ("completed", 14),
    ]
    _, first, tool, second, end = result["entries"]
    assert result["complete"] is True
    assert result["duration_ms"] == 90.0
    assert (first["duration_ms"], first["total_tokens"], first["tool_calls"]) == (
        40.0,
        120,
        ["memory_insert"],
    )
    assert (tool["tool_name"], tool["duration_ms"], tool["status"], tool["result"]) == (
        "memory_insert",
        15.0,
        "success",
        "ok",
    )
    # The second call starts when the tool's result was recorded.
    assert (second["started_at"], second["duration_ms"]) == (at(55).isoformat(), 30.0)
    assert (second["text"], second["finish_reason"]) == ("Noted: tea.", "stop")
    assert (end["stop_reason"], end["step_count"], end["usage"]["total_tokens"]) == (
        "end_turn",
        2,
        255,
    )
    assert "_start" not in tool


def test_a_tool_with_effects_is_timed_from_its_requested_event() -> None:
    requested = ToolCallRequested(
        run_id=RUN, agent_id=AGENT, step_id="step-1", tool_call_id="call_1", tool_name="x"
    )
    facts = [
        Fact(1, at(0), started()),
        Fact(2, at(40), asked_for_tool()),
        Fact(3, at(50), requested),
        Fact(4, at(53), tool_returned("error")),
    ]
    tool = timeline(RUN, facts)["entries"][2]
    assert (tool["started_at"], tool["duration_ms"], tool["status"]) == (
        at(50).isoformat(),
        3.0,
        "error",
    )


def test_a_run_in_flight_has_an_open_tool_call_and_no_end() -> None:
    other = started("run-00000000-0000-0000-0000-000000000002")
    facts = [Fact(1, at(0), started()), Fact(2, at(5), other), Fact(3, at(40), asked_for_tool())]
    result = timeline(RUN, facts)
    assert result["complete"] is False
    assert (result["ended_at"], result["duration_ms"]) == (None, None)
    assert [e["kind"] for e in result["entries"]] == ["started", "llm_call", "tool_call"]
    tool = result["entries"][2]
    assert (tool["status"], tool["ended_at"], tool["duration_ms"]) == ("pending", None, None)


def test_long_texts_are_cut_to_a_preview() -> None:
    user = ChatMessage(id="message-u", role="user", content="x" * 1000)
    run = RunStarted(run_id=RUN, agent_id=AGENT, messages=[user], max_steps=1)
    entry = timeline(RUN, [Fact(1, at(0), run)])["entries"][0]
    assert len(entry["input"]) == PREVIEW_CHARS
    assert entry["input"].endswith("…")
