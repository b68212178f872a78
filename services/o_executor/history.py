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

from collections import OrderedDict
from dataclasses import dataclass, field

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


@dataclass
class _Known:
    # Messages at or below this sequence that were in context then are in `by_id`.
    upto: int = 0
    by_id: dict[str, ChatMessage] = field(default_factory=dict)


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
        db = conn if conn is not None else self.pool
        known = self._agents.pop(lane.key, None) or _Known()
        query = _IN_CONTEXT if lane.conversation_id is None else _IN_CONVERSATION
        rows = await db.fetch(query, lane.key, exclude_run, known.upto)
        missing = [r["id"] for r in rows if r["body"] is None and r["id"] not in known.by_id]
        bodies = {r["id"]: r["body"] for r in rows if r["body"] is not None}
        if missing:
            # Seen before but never parsed here (left out as a resumed run's own).
            bodies |= {r["id"]: r["body"] for r in await db.fetch(_BODIES, missing)}
        history = [
            known.by_id[r["id"]]
            if r["id"] in known.by_id
            else ChatMessage.model_validate_json(bodies[r["id"]])
            for r in rows
        ]
        # Only what is in context now is kept: evicted messages are not read again.
        self._agents[lane.key] = _Known(
            upto=max([known.upto, *(r["seq"] for r in rows)]),
            by_id={m.id: m for m in history},
        )
        while len(self._agents) > MAX_AGENTS:
            self._agents.popitem(last=False)
        return history
