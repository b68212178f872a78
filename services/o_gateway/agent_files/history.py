"""An agent's history from its file: O's messages, which are in context, in parts that fit.

- The messages are placed in the order they were said (`created_at`; file
  order when the file does not date them all): Letta's export lists a page of
  history and then appends the in-context messages the page missed.
- The first message of the context, Letta's compiled system prompt, is left
  out: an O agent's system message is compiled by O, from the same `system`
  and blocks, and a run compiles its own at every step.
- An in-context assistant message whose tool calls were never answered (an
  export taken while a call waited) stays in the history but out of context:
  providers refuse a conversation with a call and no result.
- Each message's id derives from the agent's and the file's, so a retried
  import writes the same messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

from fastapi import HTTPException

from o_contracts.events import ImportedMessage
from o_contracts.ids import derived_id
from o_contracts.ordering import MAX_IMPORTED_PER_EVENT
from o_gateway.agent_files.letta_messages import BadMessage, to_chat
from o_gateway.agent_files.schema import FileAgent, FileMessage

# One part of a history (a MessagesImported event) is at most this large as JSON,
# well under NATS' 1 MiB payload; one message alone at most ITEM_BYTES.
PART_BYTES = 640 * 1024
ITEM_BYTES = 768 * 1024


@dataclass
class History:
    parts: list[list[ImportedMessage]] = field(default_factory=list)
    images: dict[str, bytes] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(len(p) for p in self.parts)


def history(agent: FileAgent, agent_id: str) -> History:
    out = History()
    in_context = set(agent.in_context_message_ids)
    compiled = _compiled_system(agent)
    items: list[ImportedMessage] = []
    for m in _in_order(agent.messages):
        if m.id == compiled:
            continue
        try:
            chat, content = to_chat(m, partial(_message_id, agent_id, m.id))
        except BadMessage as exc:
            raise HTTPException(422, f"agent {agent.id}, message {m.id}: {exc}") from exc
        out.images |= content.images
        when = _aware(m.created_at)
        items += [
            ImportedMessage(message=c, created_at=when, in_context=m.id in in_context) for c in chat
        ]
    items = _answered_only(items, agent.id, out.left_out)
    for item in items:
        size = len(item.model_dump_json())
        if size > ITEM_BYTES:
            raise HTTPException(
                413, f"agent {agent.id}: a message is {size} bytes, over the limit of {ITEM_BYTES}"
            )
    out.parts = _parts(items)
    return out


def _message_id(agent_id: str, file_id: str, index: int) -> str:
    return derived_id("message", agent_id, file_id, str(index))


def _compiled_system(agent: FileAgent) -> str | None:
    """The file id of the context's first message when it is a system prompt."""
    if not agent.in_context_message_ids:
        return None
    first = agent.in_context_message_ids[0]
    found = next((m for m in agent.messages if m.id == first), None)
    return first if found is not None and found.role == "system" else None


def _in_order(messages: list[FileMessage]) -> list[FileMessage]:
    if all(m.created_at is not None for m in messages):
        # (stable: messages of the same instant keep the file's order)
        return sorted(messages, key=lambda m: _utc(m.created_at))
    return list(messages)


def _utc(at: datetime | None) -> float:
    aware = _aware(at)
    assert aware is not None
    return aware.timestamp()


def _aware(at: datetime | None) -> datetime | None:
    # Letta writes UTC; a file without a zone is read as UTC too.
    return at.replace(tzinfo=UTC) if at is not None and at.tzinfo is None else at


def _answered_only(
    items: list[ImportedMessage], agent_file_id: str, left_out: list[str]
) -> list[ImportedMessage]:
    answered = {i.message.tool_call_id for i in items if i.in_context and i.message.tool_call_id}
    answered |= {a.tool_call_id for i in items if i.in_context for a in i.message.approvals or []}
    out = []
    for item in items:
        calls = [c.id for c in item.message.tool_calls]
        if item.in_context and calls and not set(calls) <= answered:
            left_out.append(
                f"agent {agent_file_id}: a message with tool calls that have no result was kept"
                " out of the context window"
            )
            item = item.model_copy(update={"in_context": False})
        out.append(item)
    return out


def _parts(items: list[ImportedMessage]) -> list[list[ImportedMessage]]:
    parts: list[list[ImportedMessage]] = []
    current: list[ImportedMessage] = []
    size = 0
    for item in items:
        item_size = len(item.model_dump_json())
        if current and (size + item_size > PART_BYTES or len(current) >= MAX_IMPORTED_PER_EVENT):
            parts.append(current)
            current, size = [], 0
        current.append(item)
        size += item_size
    if current:
        parts.append(current)
    return parts
