"""A conversation's in-context history, read from the runs projection with a parsed-message cache.

Every run reads its conversation's whole in-context history (the agent's
default conversation, or a named one with the messages a fork inherited). A projected message's
body never changes (summarizing only clears `in_context`), so this process
keeps the messages it has parsed, per agent, and asks Postgres for bodies only
past the last sequence it has seen; for the rest it needs just their ids.
Parsing was the executor's largest own cost on long conversations (profiled:
~7% of its CPU with ~100-message histories).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from o_contracts.models import ChatMessage
from o_contracts.subjects import Lane

# Agents whose messages are kept; the least recently read go first.
MAX_AGENTS = 256

# Shown to readers, never read by a run: the compiled system prompt (a run compiles
# its own, with memory as it is at each step) and approval answers (the run they
# opened has them in its RunStarted).
_NO_ANSWERS = "coalesce(jsonb_typeof({}->'approvals'), 'null') = 'null'"
_SHOWN_ONLY = "NOT compiled_system AND " + _NO_ANSWERS.format("body")
_IN_CONTEXT = (
    "SELECT id, seq, CASE WHEN seq > $3 THEN body::text END AS body FROM messages"
    " WHERE agent_id = $1 AND run_id IS DISTINCT FROM $2 AND in_context"
    f" AND conversation_id IS NULL AND {_SHOWN_ONLY} ORDER BY seq"
)
_IN_CONVERSATION = (
    "SELECT id, seq, CASE WHEN seq > $3 THEN body::text END AS body FROM messages"
    " WHERE conversation_id = $1 AND run_id IS DISTINCT FROM $2 AND in_context"
    f" AND {_SHOWN_ONLY}"
    " UNION ALL SELECT m.id, c.seq, CASE WHEN c.seq > $3 THEN m.body::text END"
    " FROM conversation_messages c JOIN messages m ON m.id = c.message_id"
    " WHERE c.conversation_id = $1 AND c.in_context AND "
    + _NO_ANSWERS.format("m.body")
    + " ORDER BY seq"
)
_BODIES = "SELECT id, body::text AS body FROM messages WHERE id = ANY($1)"
_PARAM = re.compile(r"\$(\d+)")


def _numbered_from(sql: str, first: int) -> str:
    """`sql` with its parameters $1, $2... renumbered to start at $`first`."""
    return _PARAM.sub(lambda m: f"${int(m.group(1)) + first - 1}", sql)


@dataclass
class _Known:
    # Messages at or below this sequence that were in context then are in `by_id`.
    upto: int = 0
    by_id: dict[str, ChatMessage] = field(default_factory=dict)


@dataclass(frozen=True)
class HistoryRead:
    """One read of a conversation's history, begun (HistoryCache.begin): its statement, to run
    alone or inside another (the run's own record rides in the same round trip:
    o_executor/live/execution.py), and what the cache knew when it began."""

    lane: Lane
    # One row: the in-context messages' ids, sequences and (past what is known) bodies, in
    # order, as arrays o_ids, o_seqs, o_bodies (NULL when there are none).
    sql: str
    args: tuple[object, ...]
    known: _Known


class HistoryCache:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        # By lane key (the conversation's id, or the agent's for its default one).
        self._agents: OrderedDict[str, _Known] = OrderedDict()

    async def load(
        self, lane: Lane, exclude_run: str, conn: asyncpg.Connection | None = None
    ) -> list[ChatMessage]:
        """The conversation's in-context messages in order, without those of run `exclude_run`.

        (A resumed run's own messages may be projected already; it re-adds them
        from its recorded events.) Read on `conn` when given: one whose
        projection position the caller has checked (o_runtime/reads.py).
        """
        read = self.begin(lane, exclude_run)
        db = conn if conn is not None else self.pool
        return await self.complete(read, await db.fetchrow(read.sql, *read.args), db)

    def begin(self, lane: Lane, exclude_run: str, first_param: int = 1) -> HistoryRead:
        """A read of the history (as `load`), its parameters numbered from `first_param`;
        `complete` it with the row its statement gave."""
        known = self._agents.pop(lane.key, None) or _Known()
        query = _IN_CONTEXT if lane.conversation_id is None else _IN_CONVERSATION
        sql = (
            "SELECT array_agg(h.id ORDER BY h.seq) AS o_ids, array_agg(h.seq ORDER BY h.seq)"
            " AS o_seqs, array_agg(h.body ORDER BY h.seq) AS o_bodies"
            f" FROM ({_numbered_from(query, first_param)}) AS h"
        )
        return HistoryRead(lane, sql, (lane.key, exclude_run, known.upto), known)

    async def complete(
        self,
        read: HistoryRead,
        row: Mapping[str, Any] | None,
        db: asyncpg.Connection | asyncpg.Pool,
    ) -> list[ChatMessage]:
        """The history `read`'s statement found (`row` has its o_ids, o_seqs, o_bodies; None:
        no messages); bodies it did not carry that this process has not parsed are read on
        `db`."""
        known = read.known
        row = row or {}
        ids: list[str] = row.get("o_ids") or []
        seqs: list[int] = row.get("o_seqs") or []
        carried: list[str | None] = row.get("o_bodies") or []
        missing = [i for i, body in zip(ids, carried, strict=True) if body is None]
        missing = [i for i in missing if i not in known.by_id]
        bodies = {i: body for i, body in zip(ids, carried, strict=True) if body is not None}
        if missing:
            # Seen before but never parsed here (left out as a resumed run's own).
            bodies |= {r["id"]: r["body"] for r in await db.fetch(_BODIES, missing)}
        history = [
            known.by_id[i] if i in known.by_id else ChatMessage.model_validate_json(bodies[i])
            for i in ids
        ]
        # Only what is in context now is kept: evicted messages are not read again.
        self._agents[read.lane.key] = _Known(
            upto=max([known.upto, *seqs]),
            by_id={m.id: m for m in history},
        )
        while len(self._agents) > MAX_AGENTS:
            self._agents.popitem(last=False)
        return history
