"""Stored ChatMessages rendered as Letta v1 API messages."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from o_contracts.models import ChatMessage, ToolCall, Usage
from o_gateway.otids import otid_of
from o_gateway.render import letta_messages, stop_reason, usage

DATE = datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
DATE_ISO = "2025-03-04T05:06:07+00:00"

COMMON = {
    "date": DATE_ISO,
    "name": None,
    "otid": None,
    "sender_id": None,
    "step_id": "step-1",
    "is_err": None,
    "seq_id": None,
    "run_id": "run-1",
    "conversation_id": None,
}


def render(
    m: ChatMessage, agent_type: str = "letta_v1_agent", hidden: set[str] | None = None
) -> list[dict[str, Any]]:
    out = letta_messages(m, DATE, "run-1", "step-1", agent_type, hidden)
    # Every message has its otid (test_otids.py); shown here only where it is the client's.
    for position, item in enumerate(out):
        assert item["otid"] == otid_of(m, position)
        if item["otid"] != m.otid:
            item["otid"] = None
    return out


def _check_common(out: list[dict[str, Any]], msg_id: str) -> None:
    for item in out:
        assert item["id"] == msg_id
        assert isinstance(item["message_type"], str)
        parsed = datetime.fromisoformat(item["date"])
        assert parsed.tzinfo is not None
        assert parsed == DATE.replace(microsecond=0)


def test_user_message() -> None:
    m = ChatMessage(id="message-1", role="user", content="hello", otid="o-1", name="ada")
    out = render(m)
    assert out == [
        COMMON
        | {
            "id": "message-1",
            "name": "ada",
            "otid": "o-1",
            "message_type": "user_message",
            "content": "hello",
        }
    ]
    _check_common(out, "message-1")


def test_user_message_without_content_renders_empty_string() -> None:
    out = render(ChatMessage(id="message-1", role="user"))
    assert out[0]["content"] == ""


def test_system_message() -> None:
    out = render(ChatMessage(id="message-2", role="system", content="sys"))
    assert out == [COMMON | {"id": "message-2", "message_type": "system_message", "content": "sys"}]


def test_tool_return_message() -> None:
    m = ChatMessage(
        id="message-3",
        role="tool",
        content='{"ok": true}',
        tool_call_id="call-1",
        status="error",
        stdout=["out"],
        stderr=["err"],
    )
    ret = {
        "tool_return": '{"ok": true}',
        "status": "error",
        "tool_call_id": "call-1",
        "stdout": ["out"],
        "stderr": ["err"],
    }
    assert render(m) == [
        COMMON
        | {"id": "message-3", "message_type": "tool_return_message"}
        | ret
        | {"tool_returns": [{"type": "tool"} | ret]}
    ]


def test_tool_return_defaults() -> None:
    out = render(ChatMessage(id="message-3", role="tool"))
    assert out[0]["status"] == "success"
    assert out[0]["tool_return"] == ""
    assert out[0]["tool_call_id"] == ""
    assert out[0]["tool_returns"] == [
        {
            "type": "tool",
            "tool_return": "",
            "status": "success",
            "tool_call_id": "",
            "stdout": None,
            "stderr": None,
        }
    ]


def test_v1_agent_text_is_assistant_message() -> None:
    m = ChatMessage(id="message-4", role="assistant", content="Hi there")
    out = render(m, "letta_v1_agent")
    assert out == [
        COMMON | {"id": "message-4", "message_type": "assistant_message", "content": "Hi there"}
    ]
    _check_common(out, "message-4")


def test_v1_agent_reasoning_then_text() -> None:
    m = ChatMessage(id="message-4", role="assistant", content="Hi", reasoning="think")
    out = render(m, "letta_v1_agent")
    assert [o["message_type"] for o in out] == ["reasoning_message", "assistant_message"]
    assert out[0] == COMMON | {
        "id": "message-4",
        "message_type": "reasoning_message",
        "reasoning": "think",
        "source": "reasoner_model",
        "signature": None,
    }


def test_memgpt_agent_text_is_reasoning() -> None:
    m = ChatMessage(id="message-5", role="assistant", content="inner thoughts")
    out = render(m, "memgpt_agent")
    assert out == [
        COMMON
        | {
            "id": "message-5",
            "message_type": "reasoning_message",
            "reasoning": "inner thoughts",
            "source": "non_reasoner_model",
            "signature": None,
        }
    ]


def test_memgpt_send_message_becomes_assistant_message_and_hides_return() -> None:
    call = ToolCall(
        id="call-9", name="send_message", arguments=json.dumps({"message": "Hello Ada"})
    )
    m = ChatMessage(id="message-6", role="assistant", content="greet", tool_calls=[call])
    hidden: set[str] = set()
    out = render(m, "memgpt_agent", hidden)
    assert [o["message_type"] for o in out] == ["reasoning_message", "assistant_message"]
    assert out[1] == COMMON | {
        "id": "message-6",
        "message_type": "assistant_message",
        "content": "Hello Ada",
    }
    assert hidden == {"call-9"}
    _check_common(out, "message-6")

    ret = ChatMessage(id="message-7", role="tool", content="None", tool_call_id="call-9")
    assert render(ret, "memgpt_agent", hidden) == []
    # Another call's return is still shown.
    other = ChatMessage(id="message-8", role="tool", content="x", tool_call_id="call-10")
    assert [o["message_type"] for o in render(other, "memgpt_agent", hidden)] == [
        "tool_return_message"
    ]


def test_send_message_return_shown_without_hidden_set() -> None:
    ret = ChatMessage(id="message-7", role="tool", content="None", tool_call_id="call-9")
    assert len(render(ret, "memgpt_agent", None)) == 1


def test_memgpt_send_message_with_malformed_arguments_shows_raw_text() -> None:
    call = ToolCall(id="call-1", name="send_message", arguments="{not json")
    out = render(ChatMessage(id="message-6", role="assistant", tool_calls=[call]), "memgpt_agent")
    assert out == [
        COMMON | {"id": "message-6", "message_type": "assistant_message", "content": "{not json"}
    ]


def test_memgpt_send_message_with_non_object_arguments_shows_raw_text() -> None:
    call = ToolCall(id="call-1", name="send_message", arguments='"just text"')
    out = render(ChatMessage(id="message-6", role="assistant", tool_calls=[call]), "memgpt_agent")
    assert out[0]["content"] == '"just text"'


def test_v1_agent_send_message_is_an_ordinary_tool_call() -> None:
    call = ToolCall(id="call-9", name="send_message", arguments='{"message": "x"}')
    hidden: set[str] = set()
    out = render(
        ChatMessage(id="message-6", role="assistant", tool_calls=[call]), "letta_v1_agent", hidden
    )
    tc = {"name": "send_message", "arguments": '{"message": "x"}', "tool_call_id": "call-9"}
    assert out == [
        COMMON
        | {
            "id": "message-6",
            "message_type": "tool_call_message",
            "tool_call": tc,
            "tool_calls": [tc],
        }
    ]
    assert hidden == set()


def test_several_tool_calls_are_one_tool_call_message() -> None:
    calls = [
        ToolCall(id="call-1", name="memory_replace", arguments='{"label": "human"}'),
        ToolCall(id="call-2", name="web_search", arguments='{"query": "q"}'),
    ]
    m = ChatMessage(id="message-9", role="assistant", content="doing", tool_calls=calls)
    out = render(m, "letta_v1_agent")
    assert [o["message_type"] for o in out] == ["assistant_message", "tool_call_message"]
    expected = [
        {"name": "memory_replace", "arguments": '{"label": "human"}', "tool_call_id": "call-1"},
        {"name": "web_search", "arguments": '{"query": "q"}', "tool_call_id": "call-2"},
    ]
    assert out[1]["tool_calls"] == expected
    assert out[1]["tool_call"] == expected[0]
    _check_common(out, "message-9")


def test_memgpt_send_message_between_tool_calls_splits_them() -> None:
    calls = [
        ToolCall(id="call-1", name="a", arguments="{}"),
        ToolCall(id="call-2", name="send_message", arguments='{"message": "hi"}'),
        ToolCall(id="call-3", name="b", arguments="{}"),
        ToolCall(id="call-4", name="c", arguments="{}"),
    ]
    out = render(ChatMessage(id="message-9", role="assistant", tool_calls=calls), "memgpt_agent")
    assert [o["message_type"] for o in out] == [
        "tool_call_message",
        "assistant_message",
        "tool_call_message",
    ]
    assert [c["tool_call_id"] for c in out[0]["tool_calls"]] == ["call-1"]
    assert out[1]["content"] == "hi"
    assert [c["tool_call_id"] for c in out[2]["tool_calls"]] == ["call-3", "call-4"]
    assert out[2]["tool_call"]["tool_call_id"] == "call-3"


def test_assistant_without_content_or_calls_renders_nothing() -> None:
    assert render(ChatMessage(id="message-1", role="assistant"), "letta_v1_agent") == []


@pytest.mark.parametrize(
    "date",
    [DATE, datetime(2025, 1, 1, 8, 0, tzinfo=timezone(timedelta(hours=2)))],
)
def test_date_is_iso_with_timezone_to_seconds(date: datetime) -> None:
    out = letta_messages(
        ChatMessage(id="m", role="user", content="x"), date, None, None, "letta_v1_agent"
    )
    assert out[0]["date"] == date.isoformat(timespec="seconds")
    assert datetime.fromisoformat(out[0]["date"]).utcoffset() == date.utcoffset()
    assert out[0]["run_id"] is None
    assert out[0]["step_id"] is None


def test_stop_reason_shape() -> None:
    assert stop_reason("end_turn") == {"message_type": "stop_reason", "stop_reason": "end_turn"}


def test_usage_from_model() -> None:
    u = Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15)
    assert usage(u, 2, ["run-1"]) == {
        "message_type": "usage_statistics",
        "completion_tokens": 5,
        "prompt_tokens": 10,
        "total_tokens": 15,
        "step_count": 2,
        "run_ids": ["run-1"],
        "cached_input_tokens": None,
        "cache_write_tokens": None,
        "reasoning_tokens": None,
        "context_tokens": None,
    }


def test_usage_from_dict_with_missing_keys() -> None:
    out = usage({"prompt_tokens": 7}, 1, [])
    assert out["prompt_tokens"] == 7
    assert out["completion_tokens"] == 0
    assert out["total_tokens"] == 0
    assert out["step_count"] == 1
    assert out["run_ids"] == []
    assert out["message_type"] == "usage_statistics"


def test_a_message_names_its_conversation() -> None:
    message = ChatMessage(id="message-9", role="user", content="hi")
    (shown,) = letta_messages(
        message, DATE, "run-1", None, "letta_v1_agent", conversation_id="conv-1"
    )
    assert shown["conversation_id"] == "conv-1"
