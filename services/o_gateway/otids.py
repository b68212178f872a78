"""Letta's `otid` (offline threading id) on every message the API returns.

A client sends its own otid with each input message and keeps it: the user message is
returned with it. Everything else gets an otid derived from its stored message's id and
its position among the API messages that one stored message renders into (a model's reply
may render as an assistant_message then a tool_call_message): the message id with its last
7 bits replaced by the position, as Letta does, so a client's check of the last digit holds.

The message id is recorded in the log with the message, so the otid is decided once: a
chunk streamed as tokens, the same message streamed whole, returned by POST or listed later
by GET all carry the same otid, and streaming clients merge chunks by it.
"""

from __future__ import annotations

import uuid

from o_contracts.models import ChatMessage

# Positions fit in the 7 bits Letta replaces.
MAX_POSITION = 127


def derived_otid(message_id: str, position: int) -> str:
    """The otid of the `position`-th API message rendered from the stored `message_id`."""
    if not 0 <= position <= MAX_POSITION:
        raise ValueError(f"position {position} is outside 0..{MAX_POSITION}")
    _, _, tail = message_id.partition("-")
    try:
        base = uuid.UUID(tail).int
    except ValueError:
        # Not `<prefix>-<uuid>` (ids are, at the edge): still a stable value.
        base = uuid.uuid5(uuid.NAMESPACE_URL, message_id).int
    return str(uuid.UUID(int=(base & ~0x7F) | position))


def otid_of(message: ChatMessage, position: int) -> str:
    """The otid of one API message rendered from `message`: the client's own for what it
    sent (user and system messages carry it), else derived from the stored id."""
    if message.role in ("user", "system") and message.otid and position == 0:
        return message.otid
    return derived_otid(message.id, position)
