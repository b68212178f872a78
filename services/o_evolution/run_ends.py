"""Runs that ended, for the two reactions some of them concern: a sleep-time manager's turn
(turns.py) and a canary's candidate run (rollouts.py).

Every run's end reaches the evolution service, and almost none concerns either: one query
per batch of ends says which agents manage a sleep-time group and which have a canary
running, and each reaction gets only the ends it has to look at. (Two queries, one per
reaction, were a Postgres round trip more for every run on the system.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import asyncpg

from o_evolution.rollouts import Rollouts
from o_evolution.turns import SleeptimeTurns
from o_runtime.eventlog import Recorded

# Per agent of the batch: the sleep-time group it manages (its first, as a manager has one),
# and whether a canary of it runs.
_CONCERNED = (
    "SELECT a.id AS agent_id, g.id, g.manager_agent_id, g.agent_ids,"
    " g.sleeptime_agent_frequency, EXISTS (SELECT 1 FROM evolution_rollouts r"
    " WHERE r.agent_id = a.id AND r.status = 'running') AS canary"
    " FROM unnest($1::text[]) AS a(id)"
    " LEFT JOIN LATERAL (SELECT id, manager_agent_id, agent_ids, sleeptime_agent_frequency"
    " FROM groups WHERE manager_agent_id = a.id AND manager_type = 'sleeptime'"
    " ORDER BY created_at LIMIT 1) g ON true"
)


@dataclass(frozen=True)
class Concerned:
    """Of a batch's agents: the sleep-time groups they manage, by manager; those with a
    canary running."""

    groups: Mapping[str, asyncpg.Record]
    canaries: frozenset[str]


async def concerned(pool: asyncpg.Pool, agent_ids: Sequence[str]) -> Concerned:
    rows = await pool.fetch(_CONCERNED, list(agent_ids))
    return Concerned(
        groups={r["agent_id"]: r for r in rows if r["id"] is not None},
        canaries=frozenset(r["agent_id"] for r in rows if r["canary"]),
    )


@dataclass
class RunEnds:
    """The evolution reactor's reaction to RunCompleted: one lookup, then the turns of
    sleep-time managers and the reviews of canaries, in that order."""

    pool: asyncpg.Pool
    turns: SleeptimeTurns
    rollouts: Rollouts

    async def on_runs_completed(self, records: list[Recorded]) -> None:
        agents = list({r.envelope.data.agent_id for r in records})  # type: ignore[attr-defined]
        found = await concerned(self.pool, agents)
        if found.groups:
            await self.turns.on_runs_completed(records, found.groups)
        if found.canaries:
            await self.rollouts.on_runs_completed(records, found.canaries)
