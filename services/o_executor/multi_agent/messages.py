"""What one agent sends another and what the sender gets back, in Letta's words and shapes
(letta/functions/function_sets/multi_agent.py, 0.16.8). No I/O."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from o_contracts.agent_types import speaks_plainly
from o_contracts.models import ChatMessage

NO_RESPONSE = "<no response>"
SENT = "Successfully sent message"


def expecting_reply(sender_id: str, message: str) -> str:
    """The system message the other agent gets when the sender waits for its reply."""
    # Letta adds the message again in lower case when it has capitals, "to make
    # downstream matching deterministic across LLM capitalization choices".
    said = message if message.lower() == message else f"{message}\n{message.lower()}"
    return (
        f"[Incoming message from agent with ID '{sender_id}' - your response will be "
        f"delivered to the sender] {said}"
    )


def notification(sender_id: str, message: str) -> str:
    """The system message the other agent gets when the sender does not wait."""
    return (
        f"[Incoming message from agent with ID '{sender_id}' - this is a one-way "
        "notification; if you need to respond, use an agent-to-agent messaging tool if "
        f"available] {message}"
    )


def reply_texts(messages: Sequence[ChatMessage], agent_type: str) -> list[str]:
    """The run's assistant messages as Letta's API shows them (its text for agents that
    speak plainly, `send_message`'s message for memgpt agents)."""
    texts: list[str] = []
    for m in messages:
        if m.role != "assistant" or m.approval_request:
            continue
        if speaks_plainly(agent_type):
            if m.content:
                texts.append(m.content)
            continue
        for call in m.tool_calls:
            if call.name == "send_message":
                texts.append(_message_argument(call.arguments))
    return texts


def _message_argument(arguments: str) -> str:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    return str(parsed.get("message", "")) if isinstance(parsed, dict) else arguments


def entry(agent_id: str, response: list[str]) -> dict[str, Any]:
    """One agent's answer: `{'agent_id': ..., 'response': [...]}`."""
    return {"agent_id": agent_id, "response": response or [NO_RESPONSE]}


def failed_entry(agent_id: str, error: str) -> dict[str, Any]:
    """An agent of a tag broadcast that could not be asked or did not answer."""
    return {"agent_id": agent_id, "response": [f"<error: {error}>"]}


def tool_return(value: dict[str, Any] | list[dict[str, Any]]) -> str:
    # Letta's tools return Python objects that its sandbox turns into text with str():
    # clients read the result back with ast.literal_eval, not json.loads.
    return str(value)
