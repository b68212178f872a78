"""Groups as the API shows them (Letta's Group), read from the projections.

A sleep-time group's turn counter and the last message its companions read come
from its counted turns (`sleeptime_turns`, projection "runs"); before its first
turn a group with a frequency shows Letta's starting counter, -1.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from o_evolution.turn_state import last_turn
from o_gateway.render import iso


async def render_group(conn: asyncpg.Pool | asyncpg.Connection, row: Any) -> dict[str, Any]:
    counter = processed = None
    if row["manager_type"] == "sleeptime":
        last = await last_turn(conn, row["id"])
        if last is not None:
            counter, processed = last.counter, last.last_processed
        elif row["sleeptime_agent_frequency"]:
            counter = -1
    return {
        "id": row["id"],
        "manager_type": row["manager_type"],
        "agent_ids": list(row["agent_ids"]),
        "description": row["description"],
        "project_id": None,
        "template_id": None,
        "base_template_id": None,
        "deployment_id": None,
        "shared_block_ids": [],
        "manager_agent_id": row["manager_agent_id"],
        "termination_token": row["termination_token"],
        "max_turns": row["max_turns"],
        "sleeptime_agent_frequency": row["sleeptime_agent_frequency"],
        "turns_counter": counter,
        "last_processed_message_id": processed,
        "max_message_buffer_length": None,
        "min_message_buffer_length": None,
        "hidden": row["hidden"],
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


async def group_row(conn: asyncpg.Pool | asyncpg.Connection, group_id: str) -> Any:
    return await conn.fetchrow("SELECT * FROM groups WHERE id = $1", group_id)


async def managed_group(conn: asyncpg.Pool | asyncpg.Connection, agent_id: str) -> Any:
    """The group this agent manages (Letta's multi_agent_group), if any."""
    return await conn.fetchrow(
        "SELECT * FROM groups WHERE manager_agent_id = $1 ORDER BY created_at LIMIT 1", agent_id
    )


async def sleeptime_group(conn: asyncpg.Pool | asyncpg.Connection, agent_id: str) -> Any:
    """The sleep-time group `agent_id` manages, if any."""
    return await conn.fetchrow(
        "SELECT * FROM groups WHERE manager_agent_id = $1 AND manager_type = 'sleeptime'"
        " ORDER BY created_at LIMIT 1",
        agent_id,
    )
