"""What one agent sends another and what the sender reads back (Letta 0.16.8's words and
shapes), for each kind of agent that answers."""

from __future__ import annotations

import ast
import json

from o_contracts.models import ChatMessage, ToolCall
from o_executor.multi_agent import messages

SENDER = "agent-00000000-0000-4000-8000-000000000001"


def test_a_message_expecting_a_reply_names_the_sender_and_keeps_letta_s_lower_cased_copy() -> None:
    assert messages.expecting_reply(SENDER, "The word is Banana") == (
        f"[Incoming message from agent with ID '{SENDER}' - your response will be delivered"
        " to the sender] The word is Banana\nthe word is banana"
    )
    # (only a message with capitals gets the copy)
    assert messages.expecting_reply(SENDER, "hi").endswith("the sender] hi")


def test_a_notification_says_no_reply_comes_back() -> None:
    assert messages.notification(SENDER, "Deploy at Noon") == (
        f"[Incoming message from agent with ID '{SENDER}' - this is a one-way notification;"
        " if you need to respond, use an agent-to-agent messaging tool if available]"
        " Deploy at Noon"
    )


def assistant(content: str | None = None, *calls: tuple[str, dict[str, str]]) -> ChatMessage:
    return ChatMessage(
        id="message-x",
        role="assistant",
        content=content,
        tool_calls=[
            ToolCall(id=f"call_{i}", name=name, arguments=json.dumps(args))
            for i, (name, args) in enumerate(calls)
        ],
    )


def test_the_reply_is_what_the_api_shows_as_assistant_messages() -> None:
    said = [
        assistant("thinking it over", ("memory_insert", {"label": "human"})),
        ChatMessage(id="message-t", role="tool", content="ok", tool_call_id="call_0"),
        assistant(None, ("send_message", {"message": "Yes."})),
        assistant("Done."),
    ]
    # letta_v1_agent: its text is its answer.
    assert messages.reply_texts(said, "letta_v1_agent") == ["thinking it over", "Done."]
    # memgpt agents answer with send_message; their text is reasoning.
    assert messages.reply_texts(said, "memgpt_v2_agent") == ["Yes."]


def test_the_tool_returns_python_reprs_as_letta_s_sandbox_does() -> None:
    answer = messages.entry("agent-b", ["it's fine"])
    text = messages.tool_return(answer)
    assert text == "{'agent_id': 'agent-b', 'response': [\"it's fine\"]}"
    assert ast.literal_eval(text) == answer
    assert messages.entry("agent-b", []) == {"agent_id": "agent-b", "response": ["<no response>"]}
    assert messages.tool_return([]) == "[]"
    assert messages.failed_entry("agent-c", "too slow") == {
        "agent_id": "agent-c",
        "response": ["<error: too slow>"],
    }
