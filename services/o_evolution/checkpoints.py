"""Each agent's snapshot folds as of its last evaluation's first case, kept in Postgres
(`snapshot_checkpoints`) as well as in memory: an agent's first evaluation after the
evolution service restarts reads the log on from there, not from the agent's first event
(the cost of which grows with the agent's age: docs/evolution.md, "Known limits").

A cache: a row that cannot be read (another FORMAT, its event not at its position any
more, Postgres away) is no row, and the agent is folded from its start.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field

import asyncpg
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from o_contracts import subjects
from o_contracts.envelope import MalformedMessage, decode
from o_executor.shadow import checkpoint_codec as codec
from o_executor.shadow.snapshot import Checkpoint
from o_runtime.eventlog import EventLog

log = logging.getLogger(__name__)

# How many agents' checkpoints are kept in memory besides.
KEPT_AGENTS = 8

SAVE = (
    "INSERT INTO snapshot_checkpoints (agent_id, seq, event_id, format, folds)"
    " VALUES ($1, $2, $3, $4, $5)"
    " ON CONFLICT (agent_id) DO UPDATE SET seq = excluded.seq, event_id = excluded.event_id,"
    " format = excluded.format, folds = excluded.folds, written_at = now()"
)
LOAD = "SELECT seq, event_id, format, folds FROM snapshot_checkpoints WHERE agent_id = $1"


@dataclass
class Checkpoints:
    pool: asyncpg.Pool
    eventlog: EventLog
    _kept: OrderedDict[str, Checkpoint] = field(default_factory=OrderedDict)

    async def latest(self, agent_id: str) -> Checkpoint | None:
        """The agent's last checkpoint: the one in memory, or the one kept in Postgres."""
        kept = self._kept.get(agent_id)
        if kept is not None:
            self._kept.move_to_end(agent_id)
            return kept
        try:
            row = await self.pool.fetchrow(LOAD, agent_id)
            if row is None or row["format"] != codec.FORMAT:
                return None
            if await self._event_id(row["seq"]) != row["event_id"]:
                log.info("the checkpoint of %s is not of this log; not used", agent_id)
                return None
            checkpoint = codec.decode(row["folds"])
        except codec.Unreadable as exc:
            log.warning("the checkpoint of %s is unreadable (%s); not used", agent_id, exc)
            return None
        except (OSError, asyncpg.PostgresError, NatsError) as exc:
            log.warning("the checkpoint of %s could not be read (%r)", agent_id, exc)
            return None
        self._remember(agent_id, checkpoint)
        return checkpoint

    async def keep(self, agent_id: str, checkpoint: Checkpoint) -> None:
        """The agent's checkpoint from now on (in Postgres too, unless that fails)."""
        previous = self._kept.get(agent_id)
        self._remember(agent_id, checkpoint)
        if previous is not None and previous.seq == checkpoint.seq:
            return  # (the same cases' first: written already)
        try:
            event_id = await self._event_id(checkpoint.seq)
            if event_id is None:
                return
            await self.pool.execute(
                SAVE, agent_id, checkpoint.seq, event_id, codec.FORMAT, codec.encode(checkpoint)
            )
        except (OSError, asyncpg.PostgresError, NatsError) as exc:
            log.warning("the checkpoint of %s was not kept (%r)", agent_id, exc)

    def _remember(self, agent_id: str, checkpoint: Checkpoint) -> None:
        self._kept[agent_id] = checkpoint
        self._kept.move_to_end(agent_id)
        while len(self._kept) > KEPT_AGENTS:
            self._kept.popitem(last=False)

    async def _event_id(self, seq: int) -> str | None:
        """The id of the event at `seq` (None: none there)."""
        try:
            msg = await self.eventlog.js.get_msg(subjects.EVENTS_STREAM, seq, direct=True)
            return decode(msg.data or b"").id
        except (NotFoundError, MalformedMessage):
            return None
