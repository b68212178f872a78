"""Whether a run's input may go to an agent, given the tool calls it waits on: Letta's rules,
in Letta's words (its clients match on them).

An agent whose last answer asked for approval takes answers to those calls (one for each,
no more), with or without further messages, and nothing else: a plain message is refused
(409, PENDING_APPROVAL), and so are answers when nothing waits (400) or answers to other
calls (400). Answers the conversation already has results for (a client retrying after a
lost turn) are not refused: the input goes on as its other messages, or as a keep-alive
message if it has none. Letta checks this in its agent loop, for every input whatever sent
it; O checks it twice: in the gateway before a request's run is admitted (from the pending
approvals projection), and in the executor for every StartRun (from the history the run
reads), so a command sent over NATS by another system is refused as the HTTP API refuses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from o_contracts.models import ChatMessage

PENDING_APPROVAL = "PENDING_APPROVAL"
WAITING_FOR_APPROVAL = (
    "Cannot send a new message: The agent is waiting for approval on a tool call. Please"
    " approve or deny the pending request before continuing."
)
KEEP_ALIVE = (
    "<system-alert>Automated keep-alive ping. Ignore this message and continue from where"
    " you stopped.</system-alert>"
)
# How far back a repeat of answers is looked for: the conversation's last messages.
RECENT_MESSAGES = 10
NOTHING_WAITING = (
    "Cannot process approval response: No tool call is currently awaiting approval. Please"
    " send a regular message to interact with the agent."
)


@dataclass(frozen=True)
class PendingCall:
    """A tool call waiting for an answer, and the approval request message that asked."""

    tool_call_id: str
    message_id: str


@dataclass(frozen=True)
class ApprovalRefusal:
    status: int
    # What the HTTP API answers in `detail` (a PENDING_APPROVAL refusal is an object).
    detail: str | dict[str, Any]

    @property
    def message(self) -> str:
        return self.detail if isinstance(self.detail, str) else str(self.detail["message"])


def pending_in(history: Sequence[ChatMessage]) -> list[PendingCall]:
    """The calls the conversation waits on: those of its last approval request that wait
    for an answer (not the held ones) and have none yet."""
    answered = {m.tool_call_id for m in history if m.role == "tool"}
    for message in reversed(history):
        if message.role == "assistant" and message.approval_request:
            return [
                PendingCall(call.id, message.id)
                for call in message.tool_calls
                if message.awaiting(call) and call.id not in answered
            ]
    return []


def refusal(
    answered: Sequence[str], pending: Sequence[PendingCall], sends_messages: bool
) -> ApprovalRefusal | None:
    """Why an input answering the calls `answered` (and sending messages, if
    `sends_messages`) may not go to a conversation waiting on `pending` (None: it may)."""
    if not answered:
        if not pending or not sends_messages:
            return None
        return ApprovalRefusal(
            409,
            {
                "code": PENDING_APPROVAL,
                "message": WAITING_FOR_APPROVAL,
                "pending_request_id": pending[0].message_id,
                "pending_tool_call_ids": [p.tool_call_id for p in pending],
            },
        )
    if not pending:
        return ApprovalRefusal(400, NOTHING_WAITING)
    # One answer for every waiting call, no more (the calls held with them run once all
    # are answered).
    expected = [p.tool_call_id for p in pending]
    received = list(answered)
    if set(expected) != set(received):
        return ApprovalRefusal(
            400, f"Invalid tool call IDs. Expected '{expected}', but received '{received}'."
        )
    return None


def answered_already(
    answered: Sequence[str], pending: Sequence[PendingCall], recent_calls: Iterable[str | None]
) -> bool:
    """Whether the answers repeat ones given before: nothing waits, and every answered
    call's result is among the tool calls of the conversation's last RECENT_MESSAGES
    messages (`recent_calls`: their tool_call_id, in context or just summarized away)."""
    return bool(answered) and not pending and set(answered) <= set(recent_calls)
