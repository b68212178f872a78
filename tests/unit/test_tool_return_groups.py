"""One step's tool results shown as one tool_return_message, as Letta shows them: in lists,
in a run's reply and in streams (o_gateway/tool_return_groups.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from o_contracts.models import ChatMessage, ToolCall
from o_gateway.otids import derived_otid
from o_gateway.render import letta_messages
from o_gateway.tool_return_groups import (
    StreamedReturns,
    first_groups,
    grouped,
    merged,
    message_key,
    more_rows_needed,
    shown,
    step_key,
)

DATE = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)

Row = tuple[ChatMessage, str | None, str | None]  # (message, run id, step id)


def result(n: int, status: str = "success", name: str = "roll_dice") -> ChatMessage:
    return ChatMessage(
        id=f"message-r{n}",
        role="tool",
        name=name,
        tool_call_id=f"call-{n}",
        content=str(n),
        status=status,  # type: ignore[arg-type]
    )


def answer(*calls: str, approval: bool = False) -> ChatMessage:
    return ChatMessage(
        id="message-a",
        role="assistant",
        tool_calls=[ToolCall(id=c, name="roll_dice", arguments="{}") for c in calls],
        approval_request=approval or None,
    )


def render_row(row: Row, hidden: set[str] | None = None) -> list[dict[str, Any]]:
    m, run_id, step_id = row
    return letta_messages(m, DATE, run_id, step_id, "letta_v1_agent", hidden)


def key_of(row: Row) -> tuple[str, str] | None:
    return message_key(*row)


def show(rows: list[Row], newest_first: bool = False) -> list[dict[str, Any]]:
    hidden: set[str] = set()
    return shown(rows, key_of, lambda r: render_row(r, hidden), newest_first=newest_first)


def one_return(n: int, status: str = "success") -> dict[str, Any]:
    return {
        "type": "tool",
        "tool_return": str(n),
        "status": status,
        "tool_call_id": f"call-{n}",
        "stdout": None,
        "stderr": None,
    }


def test_only_tool_results_with_a_run_and_a_step_have_a_group() -> None:
    assert step_key("tool", "run-1", "step-1") == ("run-1", "step-1")
    assert step_key("assistant", "run-1", "step-1") is None
    assert step_key("tool", "run-1", None) is None  # (an imported result: no step)
    assert step_key("tool", None, "step-1") is None


def test_neighbours_with_one_key_are_one_group_and_others_stand_alone() -> None:
    items = [("a", None), ("b", 1), ("c", 1), ("d", None), ("e", None), ("f", 1), ("g", 2)]
    groups = grouped(items, lambda item: item[1])
    assert [[name for name, _ in g] for g in groups] == [
        ["a"],
        ["b", "c"],
        ["d"],
        ["e"],
        ["f"],  # the same key again, not next to the first: a group of its own
        ["g"],
    ]


def test_a_steps_results_are_one_message_with_every_result() -> None:
    rows: list[Row] = [
        (answer("call-1", "call-2", "call-3"), "run-1", "step-1"),
        (result(1), "run-1", "step-1"),
        (result(2, "error"), "run-1", "step-1"),
        (result(3), "run-1", "step-1"),
        (ChatMessage(id="message-b", role="assistant", content="done"), "run-1", "step-2"),
    ]
    out = show(rows)
    assert [m["message_type"] for m in out] == [
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    group = out[1]
    # The first result's id, otid, date and single-result fields; all of them in tool_returns.
    assert (group["id"], group["otid"]) == ("message-r1", derived_otid("message-r1", 0))
    assert (group["tool_call_id"], group["tool_return"], group["status"]) == (
        "call-1",
        "1",
        "success",
    )
    assert group["tool_returns"] == [one_return(1), one_return(2, "error"), one_return(3)]


def test_results_of_different_steps_stay_apart() -> None:
    rows: list[Row] = [
        (result(1), "run-1", "step-1"),
        (result(2), "run-1", "step-2"),
        (result(3), "run-2", "step-2"),
    ]
    out = show(rows)
    assert [m["id"] for m in out] == ["message-r1", "message-r2", "message-r3"]
    assert [len(m["tool_returns"]) for m in out] == [1, 1, 1]


def test_a_list_newest_first_still_shows_the_first_result_first() -> None:
    rows: list[Row] = [(result(2), "run-1", "step-1"), (result(1), "run-1", "step-1")]
    (group,) = show(rows, newest_first=True)
    assert group["id"] == "message-r1"
    assert [r["tool_call_id"] for r in group["tool_returns"]] == ["call-1", "call-2"]


def test_a_hidden_reply_tool_result_leaves_the_others_as_the_group() -> None:
    reply = result(1, name="send_message")
    rows: list[Row] = [(reply, "run-1", "step-1"), (result(2), "run-1", "step-1")]
    hidden = {"call-1"}
    out = shown(
        rows, key_of, lambda r: letta_messages(r[0], DATE, r[1], r[2], "memgpt_v2_agent", hidden)
    )
    assert [(m["id"], [r["tool_call_id"] for r in m["tool_returns"]]) for m in out] == [
        ("message-r2", ["call-2"])
    ]


def test_merging_leaves_a_single_result_as_it_is() -> None:
    chunks = render_row((result(1), "run-1", "step-1"))
    assert merged(chunks) == chunks
    assert merged([]) == []


def test_a_page_takes_whole_groups_and_knows_when_it_must_read_on() -> None:
    rows = [("a", None), ("b", 1), ("c", 1), ("d", None)]

    def key(row: tuple[str, int | None]) -> int | None:
        return row[1]

    assert [r[0] for r in first_groups(rows, key, 2)] == ["a", "b", "c"]
    assert [r[0] for r in first_groups(rows, key, 1)] == ["a"]
    # Two groups are settled once a third starts; rows[:3] may not have the whole second.
    assert more_rows_needed(rows[:3], key, 2) == 1
    assert more_rows_needed(rows, key, 2) == 0
    assert more_rows_needed(rows, key, 5) == 3


def stream_result(returns: StreamedReturns, n: int, step: str = "step-1") -> list[str]:
    chunks = render_row((result(n), "run-1", step))
    return [
        f"{c['id']}:{','.join(r['tool_call_id'] for r in c['tool_returns'])}"
        for c in returns.add(step, f"call-{n}", chunks)
    ]


def test_a_stream_sends_a_steps_results_together_once_all_are_in() -> None:
    returns = StreamedReturns()
    returns.expect(answer("call-1", "call-2", "call-3"), "step-1")
    assert stream_result(returns, 1) == []
    assert returns.awaiting()
    assert stream_result(returns, 2) == []
    assert stream_result(returns, 3) == ["message-r1:call-1,call-2,call-3"]
    assert not returns.awaiting()
    assert returns.flush() == []


def test_a_stream_sends_the_answers_to_an_approval_once_all_of_their_calls_ran() -> None:
    returns = StreamedReturns()
    returns.expect_answers(["call-1", "call-2"])
    assert stream_result(returns, 1, "step-approvals") == []
    assert stream_result(returns, 2, "step-approvals") == ["message-r1:call-1,call-2"]


def test_an_approval_request_announces_no_results() -> None:
    returns = StreamedReturns()
    returns.expect(answer("call-1", approval=True), "step-1")
    assert not returns.awaiting()


def test_results_of_a_step_whose_calls_are_unknown_wait_for_what_comes_next() -> None:
    returns = StreamedReturns()
    assert stream_result(returns, 1) == []
    assert stream_result(returns, 2) == []
    # Another step's result sends them; then what the run records next sends the rest.
    assert stream_result(returns, 3, "step-2") == ["message-r1:call-1,call-2"]
    assert [c["id"] for c in returns.flush()] == ["message-r3"]


def test_whatever_comes_next_sends_a_step_left_incomplete() -> None:
    returns = StreamedReturns()
    returns.expect(answer("call-1", "call-2"), "step-1")
    assert stream_result(returns, 1) == []
    assert [c["tool_call_id"] for c in returns.flush()] == ["call-1"]
    assert not returns.awaiting()
