"""A finished run's answer (its end, usage and messages) as the runs projection records it,
handed from the projection to the run's reply.

The gateway answers a message it sent with the run's messages and usage. It read them back
from the runs projection once the executor's reply said the run was projected: a Postgres
round trip on every run's path (two TLS records where Postgres has TLS, and a statement).
The executor's runs projection has them at hand as it applies the run's events: the values
its handlers write. For a run a reply in this process is waiting for (`awaited`), the
handlers also note the run's messages as they write them (`said`), from its RunStarted on,
and its end (`ended`); the reply carries them (StartRun's reply, `result["response"]`). The
gateway reads them from Postgres only when a reply has none: the run was projected in another
process, or began before this process awaited it (resumed after a crash), or its messages
pass RESPONSE_LIMIT.

Why the notes are the rows: RUN_AND_MESSAGES reads a run's messages (the user's aside), each
as first inserted (ON CONFLICT DO NOTHING; nothing updates the body, time or step of a
run's message), and the run's end as RunCompleted set it. The notes keep each message's
first values too, in the order of their positions, and take the end from the same event.
What a handler notes in a transaction that is rolled back and applied again is the same
(the projection applies the log in order). The reply is sent only once the commit that
holds them is known (LiveRun._projected), as before. A Postgres read of the handlers' own
writes, in the projection's transaction, would have cost its message round trips
(o_runtime/deferred_writes.py): its handlers write in one.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from o_contracts.models import ChatMessage

# A run's columns and its messages (the user's own aside), one row per message (one row
# with no message if it has none), in log order: what a run's answer shows.
_COLUMNS = (
    "r.stop_reason, r.usage, r.step_count, r.conversation_id, m.body::text AS body,"
    " m.created_at, m.step_id"
)
_MESSAGES = "LEFT JOIN messages m ON m.run_id = r.id AND m.role <> 'user'"

# $1: the run; $2: only its messages past that position (what a steering run did after it
# took a message), or NULL.
RUN_AND_MESSAGES = (
    f"SELECT {_COLUMNS} FROM runs r {_MESSAGES}"
    " AND ($2::bigint IS NULL OR m.seq > $2) WHERE r.id = $1 ORDER BY m.seq"
)

# Past this size (the messages' bodies together), a reply does not carry them: the gateway
# reads them (a NATS message has a size limit, and a reply is kept small).
RESPONSE_LIMIT = 64 * 1024


@dataclass(frozen=True)
class AnswerRow:
    """One row of RUN_AND_MESSAGES, however it came (Postgres, or a reply)."""

    stop_reason: str | None
    usage: Mapping[str, Any] | None
    step_count: int
    conversation_id: str | None
    body: str | None
    created_at: datetime | None
    step_id: str | None

    def __getitem__(self, column: str) -> Any:
        return getattr(self, column)


def rows_of(records: Sequence[Mapping[str, Any]]) -> list[AnswerRow]:
    return [
        AnswerRow(
            r["stop_reason"],
            r["usage"],
            r["step_count"],
            r["conversation_id"],
            r["body"],
            r["created_at"],
            r["step_id"],
        )
        for r in records
    ]


def packed(rows: Sequence[AnswerRow]) -> dict[str, Any] | None:
    """The rows as a reply carries them (MessagePack: times as RFC 3339 text); None past
    RESPONSE_LIMIT, or for no rows."""
    if not rows or sum(len(r.body or "") for r in rows) > RESPONSE_LIMIT:
        return None
    run = rows[0]
    return {
        "stop_reason": run.stop_reason,
        "usage": dict(run.usage) if run.usage is not None else None,
        "step_count": run.step_count,
        "conversation_id": run.conversation_id,
        "messages": [
            {"body": r.body, "created_at": r.created_at.isoformat(), "step_id": r.step_id}
            for r in rows
            if r.body is not None and r.created_at is not None
        ],
    }


def unpacked(value: Any) -> list[AnswerRow] | None:
    """The rows a reply carried (`packed`), None if it carried none or not in that shape."""
    if not isinstance(value, dict):
        return None
    try:
        run = (value["stop_reason"], value["usage"], int(value["step_count"]))
        conversation_id = value["conversation_id"]
        messages = [
            (str(m["body"]), datetime.fromisoformat(m["created_at"]), m["step_id"])
            for m in value["messages"]
        ]
    except (KeyError, TypeError, ValueError):
        return None
    if not messages:
        return [AnswerRow(*run, conversation_id, None, None, None)]
    return [
        AnswerRow(*run, conversation_id, body, created_at, step_id)
        for body, created_at, step_id in messages
    ]


@dataclass
class _Notes:
    """A run's messages as the projection wrote them: by id, (position, body, time, step)."""

    said: dict[str, tuple[int, str, datetime, str | None]] = field(default_factory=dict)


class AwaitedAnswers:
    """Runs whose reply is being made in this process, what the runs projection wrote of
    them (a projector of this process, usually the same executor's), and their answers once
    it applied their end."""

    def __init__(self) -> None:
        self._awaited: Counter[str] = Counter()
        self._notes: dict[str, _Notes] = {}
        self._rows: dict[str, list[AnswerRow]] = {}

    @contextlib.contextmanager
    def awaiting(self, run_id: str) -> Iterator[None]:
        self._awaited[run_id] += 1
        try:
            yield
        finally:
            self._awaited[run_id] -= 1
            if not self._awaited[run_id]:
                del self._awaited[run_id]
                self._notes.pop(run_id, None)
                self._rows.pop(run_id, None)

    def began(self, run_id: str) -> None:
        """The projection applies the run's RunStarted: its messages are noted from here."""
        if run_id in self._awaited:
            self._notes.setdefault(run_id, _Notes())

    def said(
        self,
        run_id: str | None,
        message: ChatMessage,
        body: Mapping[str, Any],
        position: int,
        created_at: datetime,
        step_id: str | None,
    ) -> None:
        """The projection writes a message of the run (`body`: as written)."""
        notes = self._notes.get(run_id) if run_id is not None else None
        if notes is None or message.role == "user":
            return
        # (In UTC, as Postgres gives a timestamptz back, a naive time taken as UTC as asyncpg
        # writes it; a message's first values stay, as its row's do.)
        utc = created_at.replace(tzinfo=UTC) if created_at.tzinfo is None else created_at
        written = (position, json.dumps(body), utc.astimezone(UTC), step_id)
        notes.said.setdefault(message.id, written)

    def ended(
        self,
        run_id: str,
        stop_reason: str,
        usage: Mapping[str, Any],
        step_count: int,
        conversation_id: str | None,
    ) -> None:
        """The projection applies the run's end: its answer, if every message was noted."""
        notes = self._notes.get(run_id)
        if notes is None:
            return
        run = (stop_reason, dict(usage), step_count, conversation_id)
        said = sorted(notes.said.values(), key=lambda m: m[0])
        self._rows[run_id] = [
            AnswerRow(*run, body, created_at, step_id) for _, body, created_at, step_id in said
        ] or [AnswerRow(*run, None, None, None)]

    def take(self, run_id: str) -> list[AnswerRow] | None:
        return self._rows.pop(run_id, None)


# The process's: the runs projection's handlers are module-level (o_executor/projections.py),
# as are the runs they end.
awaited = AwaitedAnswers()
