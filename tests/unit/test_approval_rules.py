"""Letta's approval rules (o_contracts/approval_rules.py), shared by the gateway and the
executor: what waits, what is refused and in which words, what is a repeat."""

from __future__ import annotations

from o_contracts.approval_rules import (
    NOTHING_WAITING,
    WAITING_FOR_APPROVAL,
    PendingCall,
    answered_already,
    pending_in,
    refusal,
)
from o_contracts.models import ChatMessage, ToolCall


def call(call_id: str) -> ToolCall:
    return ToolCall(id=call_id, name="memory_insert", arguments="{}")


def asking(*call_ids: str, waiting: list[str] | None = None) -> ChatMessage:
    return ChatMessage(
        id="message-ask",
        role="assistant",
        tool_calls=[call(c) for c in call_ids],
        approval_request=True,
        approval_tool_call_ids=waiting,
    )


def returned(call_id: str) -> ChatMessage:
    return ChatMessage(id=f"message-{call_id}", role="tool", tool_call_id=call_id, content="ok")


USER = ChatMessage(id="message-user", role="user", content="hi")


def test_what_waits_is_the_last_requests_unanswered_calls_that_wait() -> None:
    assert pending_in([USER]) == []
    assert pending_in([USER, asking("a", "b")]) == [
        PendingCall("a", "message-ask"),
        PendingCall("b", "message-ask"),
    ]
    # A held call (run once the others are answered) waits for nothing.
    assert pending_in([USER, asking("a", "b", waiting=["b"])]) == [PendingCall("b", "message-ask")]
    assert pending_in([USER, asking("a", "b"), returned("a")]) == [PendingCall("b", "message-ask")]
    answered = [USER, asking("a"), returned("a"), USER]
    assert pending_in(answered) == []


def test_a_message_while_calls_wait_is_refused_with_lettas_object() -> None:
    waiting = [PendingCall("a", "message-ask"), PendingCall("b", "message-ask")]
    refused = refusal([], waiting, sends_messages=True)
    assert refused is not None and refused.status == 409
    assert refused.detail == {
        "code": "PENDING_APPROVAL",
        "message": WAITING_FOR_APPROVAL,
        "pending_request_id": "message-ask",
        "pending_tool_call_ids": ["a", "b"],
    }
    assert refused.message == WAITING_FOR_APPROVAL
    # An input that sends nothing (a forced summary) is not a message.
    assert refusal([], waiting, sends_messages=False) is None
    assert refusal([], [], sends_messages=True) is None


def test_answers_must_be_one_for_each_waiting_call() -> None:
    waiting = [PendingCall("a", "m"), PendingCall("b", "m")]
    assert refusal(["b", "a"], waiting, sends_messages=True) is None
    refused = refusal(["a"], waiting, sends_messages=False)
    assert refused is not None and refused.status == 400
    assert refused.detail == "Invalid tool call IDs. Expected '['a', 'b']', but received '['a']'."
    refused = refusal(["a", "b", "c"], waiting, sends_messages=False)
    assert refused is not None and refused.status == 400
    nothing = refusal(["a"], [], sends_messages=False)
    assert nothing is not None and (nothing.status, nothing.detail) == (400, NOTHING_WAITING)


def test_a_repeat_is_answers_to_calls_with_results_among_the_recent_messages() -> None:
    assert answered_already(["a"], [], ["a", None])
    assert answered_already(["a", "b"], [], [None, "b", "a"])
    assert not answered_already(["a", "c"], [], ["a"])
    assert not answered_already([], [], ["a"])
    # Calls still waiting: answers, not a repeat.
    assert not answered_already(["a"], [PendingCall("a", "m")], ["a"])
