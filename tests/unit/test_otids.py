"""Letta's otid on every returned message: the client's own on what it sent, else derived
from the stored message's id and its position, the same however the message reaches a client
(whole, as token deltas, listed later)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from o_contracts.ids import new_id
from o_contracts.models import ChatMessage, ToolCall
from o_gateway.deltas import RunDeltas, TokenDelta, ToolCallPiece
from o_gateway.otids import derived_otid
from o_gateway.render import DEFAULT_VIEW, AssistantView, letta_messages
from o_gateway.streaming import Numbering

DATE = datetime(2025, 3, 4, tzinfo=UTC)
RUN = "run-1"


def rendered(
    m: ChatMessage, agent_type: str = "letta_v1_agent", view: AssistantView = DEFAULT_VIEW
) -> list[tuple[str, str]]:
    out = letta_messages(m, DATE, RUN, "step-1", agent_type, set(), view)
    return [(x["message_type"], x["otid"]) for x in out]


def test_a_derived_otid_is_the_id_with_its_position_in_the_last_bits() -> None:
    message_id = new_id("message")
    base = uuid.UUID(message_id.removeprefix("message-")).int
    for position in (0, 1, 9, 127):
        otid = derived_otid(message_id, position)
        assert uuid.UUID(otid).int == (base & ~0x7F) | position
        assert derived_otid(message_id, position) == otid  # the same every time
    # Letta's clients check the last digit against the position.
    assert derived_otid(message_id, 3)[-1] == "3"
    assert derived_otid(message_id, 0) != derived_otid(new_id("message"), 0)
    with pytest.raises(ValueError):
        derived_otid(message_id, 128)


def test_the_user_keeps_its_otid_and_a_message_without_one_gets_a_derived_one() -> None:
    sent = ChatMessage(id=new_id("message"), role="user", content="hi", otid="client-otid")
    assert rendered(sent) == [("user_message", "client-otid")]
    typed = ChatMessage(id=new_id("message"), role="user", content="hi")  # `input`, a heartbeat
    assert rendered(typed) == [("user_message", derived_otid(typed.id, 0))]


def test_a_reply_numbers_what_it_renders_into() -> None:
    reply = ChatMessage(
        id=new_id("message"),
        role="assistant",
        content="Let me look.",
        tool_calls=[ToolCall(id="call-1", name="conversation_search", arguments="{}")],
    )
    assert rendered(reply) == [
        ("assistant_message", derived_otid(reply.id, 0)),
        ("tool_call_message", derived_otid(reply.id, 1)),
    ]
    result = ChatMessage(id=new_id("message"), role="tool", content="[]", tool_call_id="call-1")
    assert rendered(result) == [("tool_return_message", derived_otid(result.id, 0))]


def test_without_assistant_message_the_reply_tool_shows_as_a_call_and_its_return() -> None:
    reply = ChatMessage(
        id=new_id("message"),
        role="assistant",
        tool_calls=[ToolCall(id="call-1", name="send_message", arguments='{"message": "Hi"}')],
    )
    result = ChatMessage(id=new_id("message"), role="tool", content="None", tool_call_id="call-1")
    hidden: set[str] = set()
    shown = letta_messages(reply, DATE, RUN, None, "memgpt_v2_agent", hidden)
    assert [(m["message_type"], m["content"]) for m in shown] == [("assistant_message", "Hi")]
    assert letta_messages(result, DATE, RUN, None, "memgpt_v2_agent", hidden) == []
    # Also on a page of its own (a client's next page starts after the call).
    result = result.model_copy(update={"name": "send_message"})
    assert letta_messages(result, DATE, RUN, None, "memgpt_v2_agent", set()) == []

    plain = AssistantView(use_assistant_message=False)
    assert rendered(reply, "memgpt_v2_agent", plain) == [
        ("tool_call_message", derived_otid(reply.id, 0))
    ]
    assert rendered(result, "memgpt_v2_agent", plain) == [
        ("tool_return_message", derived_otid(result.id, 0))
    ]
    # A renamed reply tool (assistant_message_tool_name / _kwarg) is the one shown as speech.
    custom = ChatMessage(
        id=new_id("message"),
        role="assistant",
        tool_calls=[ToolCall(id="call-2", name="say", arguments='{"text": "Yo"}')],
    )
    view = AssistantView.of(
        {"assistant_message_tool_name": "say", "assistant_message_tool_kwarg": "text"}
    )
    out = letta_messages(custom, DATE, RUN, None, "memgpt_v2_agent", set(), view)
    assert [(m["message_type"], m["content"]) for m in out] == [("assistant_message", "Yo")]


def test_token_deltas_carry_the_otid_their_recorded_message_renders_with() -> None:
    message_id = new_id("message")
    deltas = RunDeltas(RUN, "letta_v1_agent")
    text = deltas.on_delta(TokenDelta(message_id=message_id, text="Let me"))
    call = deltas.on_delta(
        TokenDelta(
            message_id=message_id, tool_call=ToolCallPiece("call-1", "conversation_search", "{")
        )
    )
    reply = ChatMessage(
        id=message_id,
        role="assistant",
        content="Let me look.",
        tool_calls=[ToolCall(id="call-1", name="conversation_search", arguments="{}")],
    )
    whole = letta_messages(reply, DATE, RUN, "step-1", "letta_v1_agent")
    rest = deltas.on_recorded(reply, whole)
    assert text is not None and call is not None
    assert text["otid"] == whole[0]["otid"] and call["otid"] == whole[1]["otid"]
    assert [c["otid"] for c in rest] == [whole[0]["otid"], whole[1]["otid"]]
    # A tool call streamed with no text before it is its message's first.
    alone = RunDeltas(RUN, "letta_v1_agent").on_delta(
        TokenDelta(message_id=message_id, tool_call=ToolCallPiece("call-1", "x", "{}"))
    )
    assert alone is not None and alone["otid"] == derived_otid(message_id, 0)


def test_numbering_counts_every_chunk_and_leaves_out_those_the_client_has() -> None:
    fresh = Numbering()
    assert [fresh.next() for _ in range(3)] == [1, 2, 3]
    resumed = Numbering(starting_after=2)
    assert [resumed.next() for _ in range(4)] == [None, None, 3, 4]


def test_a_chunk_its_deltas_carried_whole_is_sent_empty() -> None:
    message_id = new_id("message")
    chunk = letta_messages(
        ChatMessage(
            id=message_id,
            role="assistant",
            content="Hi",
            tool_calls=[ToolCall(id="call-1", name="t", arguments="{}")],
        ),
        DATE,
        RUN,
        None,
        "letta_v1_agent",
    )
    empty_text, empty_call = (RunDeltas.nothing_new(c) for c in chunk)
    assert empty_text["content"] == "" and empty_text["otid"] == chunk[0]["otid"]
    assert empty_call["tool_calls"] == [{"name": None, "arguments": "", "tool_call_id": "call-1"}]
