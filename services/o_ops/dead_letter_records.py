"""Dead letters as an operator reads them, and whether one may be redriven (no I/O).

A dead letter (o_runtime/dead_letters.py) is the original message's bytes on
`o.dlq.<consumer>` in O_DEAD_LETTERS, with the reason and the origin in headers. Its id
here is its sequence in that stream.

Only commands are redriven: a command is a request, and sending it again asks for the
same work; every command handler answers a command it has done already from its recorded
outcome (exactly once under redelivery), so a command redriven twice is done once. An
event dead-lettered by a projection or a reactor is in the log already: sending it again
would append it twice. Its cure is fixing the cause and rebuilding the projection.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgpack

from o_contracts import subjects

REASON = "O-Reason"
CONSUMER = "O-Consumer"
ORIGIN_SUBJECT = "O-Origin-Subject"
ORIGIN_SEQ = "O-Origin-Seq"
# On a redriven command: which dead letter it came from.
REDRIVEN_FROM = "O-Redriven-From"


@dataclass(frozen=True)
class DeadLetter:
    id: int
    time: datetime | None
    consumer: str
    reason: str
    origin_subject: str
    origin_seq: int | None
    # What the body says it is (None: not even MessagePack with a type).
    type: str | None
    envelope_id: str | None
    aggregate_id: str | None
    size: int

    @property
    def is_command(self) -> bool:
        return self.origin_subject.startswith(subjects.COMMANDS_PREFIX + ".")

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "time": self.time.isoformat() if self.time else None,
            "consumer": self.consumer,
            "reason": self.reason,
            "origin_subject": self.origin_subject,
            "origin_seq": self.origin_seq,
            "type": self.type,
            "envelope_id": self.envelope_id,
            "aggregate_id": self.aggregate_id,
            "size": self.size,
            "redrivable": self.is_command,
        }


def unpacked(data: bytes) -> Any:
    """The body as data, or None when it is not MessagePack."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:
        return None


def read(
    seq: int, subject: str, data: bytes, headers: dict[str, str] | None, time: datetime | None
) -> DeadLetter:
    headers = headers or {}
    body = unpacked(data)
    envelope = body if isinstance(body, dict) else {}
    origin_seq = headers.get(ORIGIN_SEQ, "")

    def text(key: str) -> str | None:
        value = envelope.get(key)
        return value if isinstance(value, str) else None

    return DeadLetter(
        id=seq,
        time=time,
        consumer=headers.get(CONSUMER) or subject.removeprefix(subjects.DEAD_LETTER_PREFIX + "."),
        reason=headers.get(REASON, ""),
        origin_subject=headers.get(ORIGIN_SUBJECT, ""),
        origin_seq=int(origin_seq) if origin_seq.isdigit() else None,
        type=text("type"),
        envelope_id=text("id"),
        aggregate_id=text("aggregate_id"),
        size=len(data),
    )


def jsonable(value: Any) -> Any:
    """MessagePack data as JSON can show it (bytes as base64)."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def shown_body(data: bytes) -> Any:
    body = unpacked(data)
    if body is None:
        return {"undecodable": base64.b64encode(data).decode()}
    return jsonable(body)


class NotRedrivable(Exception):
    pass


def redrive_target(letter: DeadLetter) -> str:
    """The subject a dead letter goes back to; NotRedrivable says why it may not."""
    if letter.is_command:
        return letter.origin_subject
    if letter.origin_subject.startswith(subjects.EVENTS_PREFIX + "."):
        raise NotRedrivable(
            f"dead letter {letter.id} is an event ({letter.origin_subject}, seq"
            f" {letter.origin_seq}) that {letter.consumer} could not apply; it is in the log"
            " already, so it is never sent again: fix the cause, then rebuild"
            + (
                f" (python -m o_ops projections rebuild {proj})"
                if (proj := letter.consumer.removeprefix("projection-")) != letter.consumer
                else ""
            )
        )
    raise NotRedrivable(
        f"dead letter {letter.id} came from {letter.origin_subject or 'nowhere known'},"
        " not a command subject"
    )


def redrive_msg_id(letter: DeadLetter) -> str:
    """The redriven command's Nats-Msg-Id: the same for every redrive of one dead letter,
    so two at once (two operators, a retried call) are one message in the stream. Not the
    original command's id: the stream would take it for that command, within its
    deduplication window, and drop it."""
    return f"redrive-{subjects.DEAD_LETTER_STREAM}-{letter.id}"
