"""The gateway's read model of multi-agent groups (projection "groups").

A sleep-time group's turns (its counter, the last message its companions read)
are not here: they are events on the manager's subject, in the runs projection's
`sleeptime_turns` (o_executor/projections.py).
"""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import GroupCreated, GroupDeleted, GroupUpdated
from o_contracts.projection_names import GROUPS
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection, assignments

groups = Projection(name=GROUPS, filter_subject=subjects.GROUP_EVENTS, tables=["groups"])

# GroupUpdated.changes keys that are columns.
COLUMNS = (
    "agent_ids",
    "description",
    "manager_agent_id",
    "sleeptime_agent_frequency",
    "max_turns",
    "termination_token",
    "hidden",
)


@groups.on(GroupCreated)
async def group_created(conn: asyncpg.Connection, e: GroupCreated, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO groups (id, manager_type, agent_ids, description, manager_agent_id,"
        " sleeptime_agent_frequency, max_turns, termination_token, hidden, managed,"
        " created_at, updated_at, last_seq)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$11,$12) ON CONFLICT (id) DO NOTHING",
        e.group_id,
        e.manager_type,
        e.agent_ids,
        e.description,
        e.manager_agent_id,
        e.sleeptime_agent_frequency,
        e.max_turns,
        e.termination_token,
        e.hidden,
        e.managed,
        rec.envelope.time,
        rec.seq,
    )


@groups.on(GroupUpdated)
async def group_updated(conn: asyncpg.Connection, e: GroupUpdated, rec: Recorded) -> None:
    args: list[object] = [e.group_id, rec.envelope.time, rec.seq]
    await conn.execute(
        f"UPDATE groups SET updated_at = $2, last_seq = $3{assignments(e.changes, COLUMNS, args)}"
        " WHERE id = $1",
        *args,
    )


@groups.on(GroupDeleted)
async def group_deleted(conn: asyncpg.Connection, e: GroupDeleted, rec: Recorded) -> None:
    await conn.execute("DELETE FROM groups WHERE id = $1", e.group_id)
