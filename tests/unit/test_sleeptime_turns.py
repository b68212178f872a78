"""Sleep-time turns decided (o_evolution/sleeptime.py): the counter, the budget, the transcript."""

from __future__ import annotations

from o_contracts.models import ChatMessage, ToolCall
from o_evolution.settings import SleeptimeBudget
from o_evolution.sleeptime import (
    GroupState,
    Spent,
    companion_input,
    companion_run_id,
    count_turn,
    reflection_run_id,
    transcript_line,
)

BUDGET = SleeptimeBudget(runs_per_hour=3, tokens_per_day=1000)


def turns(frequency: int | None, n: int) -> list[bool]:
    """Which of n turns start the companion, the state carried from each to the next."""
    state = GroupState("group-1", ("agent-c",), frequency)
    out = []
    for i in range(n):
        turn = count_turn(state, "agent-p", f"run-{i}", f"message-{i}", Spent(), BUDGET)
        out.append(bool(turn.started))
        state = GroupState(
            "group-1", ("agent-c",), frequency, turn.turns_counter, turn.last_processed_message_id
        )
    return out


def test_the_first_turn_fires_then_every_frequency_turns() -> None:
    assert turns(2, 6) == [True, False, True, False, True, False]
    assert turns(5, 11) == [
        True,
        False,
        False,
        False,
        False,
        True,
        False,
        False,
        False,
        False,
        True,
    ]
    assert turns(None, 3) == [True, True, True]


def test_a_started_turn_moves_what_companions_have_read() -> None:
    state = GroupState("group-1", ("agent-c",), 1, last_processed="message-0")
    turn = count_turn(state, "agent-p", "run-1", "message-9", Spent(), BUDGET)
    assert (turn.after_message_id, turn.last_processed_message_id) == ("message-0", "message-9")
    assert [r.run_id for r in turn.started] == [companion_run_id("run-1", "agent-c")]
    # Derived: the same turn decided again names the same run.
    assert companion_run_id("run-1", "agent-c") == turn.started[0].run_id


def test_a_run_that_left_no_messages_starts_nothing() -> None:
    state = GroupState("group-1", ("agent-c",), 1)
    turn = count_turn(state, "agent-p", "run-1", None, Spent(), BUDGET)
    assert turn.started == [] and turn.skipped is None


def test_past_the_budget_a_turn_is_skipped_and_says_why() -> None:
    state = GroupState("group-1", ("agent-c",), 1, last_processed="message-0")
    runs = count_turn(state, "agent-p", "run-1", "message-9", Spent(runs_last_hour=3), BUDGET)
    assert runs.started == [] and "O_SLEEPTIME_RUNS_PER_HOUR=3" in (runs.skipped or "")
    # The messages wait for the next turn that runs.
    assert runs.last_processed_message_id == "message-0"
    tokens = count_turn(state, "agent-p", "run-1", "message-9", Spent(0, 1000), BUDGET)
    assert "O_SLEEPTIME_TOKENS_PER_DAY=1000" in (tokens.skipped or "")
    assert count_turn(state, "agent-p", "run-1", "message-9", Spent(2, 999), BUDGET).started


def test_a_due_reflection_runs_on_the_schedule_as_the_first_companions_run() -> None:
    state = GroupState("group-1", ("agent-c", "agent-d"), 2, last_processed="message-0")
    fired = count_turn(state, "agent-p", "run-1", "message-9", Spent(), BUDGET, reflection_due=True)
    assert [(r.agent_id, r.purpose) for r in fired.started] == [
        ("agent-c", "sleeptime"),
        ("agent-d", "sleeptime"),
        ("agent-c", "reflection"),
    ]
    assert fired.started[2].run_id == reflection_run_id("run-1", "agent-c")
    assert fired.started[2].run_id != companion_run_id("run-1", "agent-c")
    assert fired.started[2].request_config("run-1") == {
        "run_type": "sleeptime_reflection",
        "manager_run_id": "run-1",
    }
    # Not on a turn that does not fire: it waits for the schedule.
    quiet = GroupState("group-1", ("agent-c",), 2, counter=0, last_processed="message-0")
    between = count_turn(
        quiet, "agent-p", "run-2", "message-9", Spent(), BUDGET, reflection_due=True
    )
    assert between.turns_counter == 1 and between.started == []
    # It counts against the budget like any companion run: 2 of 3 left, 3 wanted.
    spent = count_turn(
        state,
        "agent-p",
        "run-1",
        "message-9",
        Spent(runs_last_hour=1),
        BUDGET,
        reflection_due=True,
    )
    assert spent.started == [] and "O_SLEEPTIME_RUNS_PER_HOUR=3" in (spent.skipped or "")


def test_the_transcript_frames_the_primary_conversation() -> None:
    call = ToolCall(id="c1", name="send_message", arguments='{"message": "hi Sam"}')
    other = ToolCall(id="c2", name="conversation_search", arguments="{}")
    messages = [
        ChatMessage(id="m0", role="system", content="prompt"),
        ChatMessage(id="m1", role="user", content="my favourite colour is coral"),
        ChatMessage(id="m2", role="assistant", content="noted", tool_calls=[call, other]),
        ChatMessage(id="m3", role="tool", content="3 results", tool_call_id="c2"),
    ]
    assert transcript_line(messages[0]) is None
    text = companion_input(messages)
    assert text.startswith("<system-reminder>")
    assert text.endswith(
        "Messages:\nuser: my favourite colour is coral\nassistant: noted\nassistant: hi Sam\n"
        "assistant: Calling tool conversation_search\nassistant: Tool call returned 3 results"
    )


def test_a_long_transcript_keeps_its_latest_lines() -> None:
    messages = [ChatMessage(id=f"m{i}", role="user", content="x" * 1000) for i in range(300)]
    text = companion_input(messages)
    assert len(text) < 210_000
    assert "earlier lines left out]" in text
