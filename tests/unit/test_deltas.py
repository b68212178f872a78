"""A streamed run's token deltas, and what its recorded messages add beyond them.

Deltas are best effort (core NATS): these are the cases a client must still get
every piece of a message once, whatever was lost or came late.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from o_contracts.models import ChatMessage, ToolCall
from o_gateway.deltas import DeltaTracker, RunDeltas, TokenDelta, ToolCallPiece
from o_gateway.render import letta_messages

RUN = "run-1"
MESSAGE = "message-1"
DATE = datetime(2025, 3, 4, tzinfo=UTC)


def text(piece: str, message_id: str = MESSAGE) -> TokenDelta:
    return TokenDelta(message_id=message_id, text=piece)


def call_piece(call_id: str, arguments: str, name: str | None = None) -> TokenDelta:
    return TokenDelta(message_id=MESSAGE, tool_call=ToolCallPiece(call_id, name, arguments))


def recorded(deltas: RunDeltas, message: ChatMessage) -> list[dict[str, Any]]:
    chunks = letta_messages(message, DATE, RUN, "step-1", deltas.agent_type)
    return deltas.on_recorded(message, chunks)


def test_the_tracker_says_what_a_whole_adds_to_what_was_sent() -> None:
    sent = DeltaTracker()
    assert not sent and sent.rest("a", "hello") is None
    sent.add("a", "hel")
    sent.add("a", "l")
    assert sent
    assert sent.rest("a", "hello") == "o"
    assert sent.rest("a", "hell") == ""
    # What was sent is not the start of the whole: nothing more, never a repeat.
    assert sent.rest("a", "help") == ""
    assert sent.rest("b", "other") is None


def test_text_deltas_are_sent_as_they_come() -> None:
    deltas = RunDeltas(RUN, "letta_v1_agent")
    first = deltas.on_delta(text("Hel"))
    assert first is not None
    assert (first["id"], first["message_type"], first["content"]) == (
        MESSAGE,
        "assistant_message",
        "Hel",
    )
    assert deltas.on_delta(text("")) is None
    memgpt = RunDeltas(RUN, "memgpt_v2_agent").on_delta(text("thinking"))
    assert memgpt is not None and memgpt["message_type"] == "reasoning_message"


def test_the_recorded_message_sends_only_the_text_the_deltas_missed() -> None:
    deltas = RunDeltas(RUN, "letta_v1_agent")
    deltas.on_delta(text("Hello, "))
    [rest] = recorded(deltas, ChatMessage(id=MESSAGE, role="assistant", content="Hello, world"))
    assert (rest["id"], rest["content"]) == (MESSAGE, "world")


def test_nothing_more_when_the_deltas_carried_it_all() -> None:
    deltas = RunDeltas(RUN, "letta_v1_agent")
    deltas.on_delta(text("Hello"))
    assert recorded(deltas, ChatMessage(id=MESSAGE, role="assistant", content="Hello")) == []


def test_a_message_with_no_deltas_is_sent_as_recorded() -> None:
    deltas = RunDeltas(RUN, "letta_v1_agent")
    deltas.on_delta(text("other", message_id="message-0"))
    message = ChatMessage(id=MESSAGE, role="assistant", content="Hello")
    chunks = letta_messages(message, DATE, RUN, "step-1", "letta_v1_agent")
    assert deltas.on_recorded(message, chunks) == chunks


def test_deltas_that_come_after_their_message_is_recorded_are_dropped() -> None:
    deltas = RunDeltas(RUN, "letta_v1_agent")
    recorded(deltas, ChatMessage(id=MESSAGE, role="assistant", content="Hello"))
    assert deltas.on_delta(text("Hel")) is None
    assert deltas.on_delta(call_piece("call-1", "{}", name="web_search")) is None


def test_tool_call_pieces_name_the_call_first_then_carry_arguments() -> None:
    deltas = RunDeltas(RUN, "letta_v1_agent")
    first = deltas.on_delta(call_piece("call-1", "", name="memory_insert"))
    then = deltas.on_delta(call_piece("call-1", '{"label"'))
    assert first is not None and then is not None
    assert first["message_type"] == "tool_call_message" and first["id"] == MESSAGE
    named = {"name": "memory_insert", "arguments": "", "tool_call_id": "call-1"}
    assert first["tool_call"] == named
    assert then["tool_calls"] == [{"name": None, "arguments": '{"label"', "tool_call_id": "call-1"}]


def test_the_recorded_calls_send_missed_arguments_and_missed_calls() -> None:
    deltas = RunDeltas(RUN, "letta_v1_agent")
    deltas.on_delta(call_piece("call-1", '{"a": ', name="first"))
    deltas.on_delta(call_piece("call-2", '{"b": 2}', name="second"))
    message = ChatMessage(
        id=MESSAGE,
        role="assistant",
        tool_calls=[
            ToolCall(id="call-1", name="first", arguments='{"a": 1}'),
            ToolCall(id="call-2", name="second", arguments='{"b": 2}'),
            ToolCall(id="call-3", name="third", arguments="{}"),
        ],
    )
    [chunk] = recorded(deltas, message)
    assert chunk["message_type"] == "tool_call_message" and chunk["id"] == MESSAGE
    assert chunk["tool_calls"] == [
        {"name": None, "arguments": "1}", "tool_call_id": "call-1"},
        {"name": "third", "arguments": "{}", "tool_call_id": "call-3"},
    ]


def test_calls_the_pieces_carried_whole_send_nothing_more() -> None:
    deltas = RunDeltas(RUN, "letta_v1_agent")
    deltas.on_delta(call_piece("call-1", "{}", name="first"))
    call = ToolCall(id="call-1", name="first", arguments="{}")
    assert recorded(deltas, ChatMessage(id=MESSAGE, role="assistant", tool_calls=[call])) == []


def test_without_streamed_calls_a_tool_call_message_is_sent_as_recorded() -> None:
    deltas = RunDeltas(RUN, "letta_v1_agent")
    call = ToolCall(id="call-1", name="first", arguments="{}")
    message = ChatMessage(id=MESSAGE, role="assistant", tool_calls=[call])
    chunks = letta_messages(message, DATE, RUN, "step-1", "letta_v1_agent")
    assert deltas.on_recorded(message, chunks) == chunks


def test_text_and_calls_of_one_message_are_completed_each_by_its_own_deltas() -> None:
    deltas = RunDeltas(RUN, "letta_v1_agent")
    deltas.on_delta(text("Let me "))
    deltas.on_delta(call_piece("call-1", "{}", name="web_search"))
    call = ToolCall(id="call-1", name="web_search", arguments="{}")
    message = ChatMessage(id=MESSAGE, role="assistant", content="Let me look.", tool_calls=[call])
    [chunk] = recorded(deltas, message)
    assert (chunk["message_type"], chunk["content"]) == ("assistant_message", "look.")


def test_tool_returns_are_sent_as_recorded() -> None:
    deltas = RunDeltas(RUN, "letta_v1_agent")
    deltas.on_delta(call_piece("call-1", "{}", name="web_search"))
    message = ChatMessage(id="message-2", role="tool", tool_call_id="call-1", content="ok")
    chunks = letta_messages(message, DATE, RUN, "step-1", "letta_v1_agent")
    assert deltas.on_recorded(message, chunks) == chunks


def test_deltas_from_the_wire() -> None:
    assert TokenDelta.from_wire({"message_id": MESSAGE, "text": "hi"}) == text("hi")
    piece = {"id": "call-1", "name": None, "arguments": "{"}
    assert TokenDelta.from_wire({"message_id": MESSAGE, "tool_call": piece}) == call_piece(
        "call-1", "{"
    )


def test_a_memgpt_reply_is_sent_whole_after_its_streamed_thoughts() -> None:
    # The thoughts streamed as text deltas; the reply (send_message) did not: it
    # must come whole once recorded, never be taken for the thoughts' rest.
    deltas = RunDeltas(RUN, "memgpt_v2_agent")
    deltas.on_delta(text("Let me "))
    deltas.on_delta(text("think."))
    reply = ChatMessage(
        id=MESSAGE,
        role="assistant",
        content="Let me think.",
        tool_calls=[ToolCall(id="c1", name="send_message", arguments='{"message": "Hi Sam!"}')],
    )
    sent = recorded(deltas, reply)
    assert [(c["message_type"], c.get("content")) for c in sent] == [
        ("assistant_message", "Hi Sam!")
    ]


def test_a_memgpt_reply_follows_the_rest_of_partly_streamed_thoughts() -> None:
    deltas = RunDeltas(RUN, "memgpt_v2_agent")
    deltas.on_delta(text("Let me "))
    reply = ChatMessage(
        id=MESSAGE,
        role="assistant",
        content="Let me think.",
        tool_calls=[ToolCall(id="c1", name="send_message", arguments='{"message": "Hi Sam!"}')],
    )
    sent = recorded(deltas, reply)
    assert [(c["message_type"], c.get("reasoning") or c.get("content")) for c in sent] == [
        ("reasoning_message", "think."),
        ("assistant_message", "Hi Sam!"),
    ]
