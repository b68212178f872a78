"""The memory service's read model: blocks, their versions, and which agent has which."""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    AgentCreated,
    AgentDeleted,
    AgentUpdated,
    BlockAttached,
    BlockCreated,
    BlockDeleted,
    BlockDetached,
    BlockUpdated,
)
from o_contracts.ordering import position
from o_contracts.projection_names import MEMORY
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection, assignments

memory = Projection(
    name=MEMORY,
    filter_subject=subjects.ALL_EVENTS,
    tables=["blocks", "block_versions", "agent_blocks"],
)

_BLOCK_FIELDS = ("label", "value", "limit", "description", "read_only", "metadata", "tags")


@memory.on(BlockCreated)
async def block_created(conn: asyncpg.Connection, e: BlockCreated, rec: Recorded) -> None:
    s = e.spec
    await conn.execute(
        'INSERT INTO blocks (id, label, value, "limit", description, read_only, metadata,'
        " tags, version, created_at, updated_at, last_seq)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,1,$9,$9,$10) ON CONFLICT (id) DO NOTHING",
        e.block_id,
        s.label,
        s.value,
        s.limit,
        s.description,
        s.read_only,
        s.metadata,
        s.tags,
        rec.envelope.time,
        rec.seq,
    )
    await conn.execute(
        "INSERT INTO block_versions (block_id, version, value, changes, actor, agent_id, seq,"
        " created_at, command_id) VALUES ($1, 1, $2, $3, 'api', NULL, $4, $5, $6)"
        " ON CONFLICT DO NOTHING",
        e.block_id,
        s.value,
        s.model_dump(mode="json"),
        rec.seq,
        rec.envelope.time,
        rec.envelope.causation_id,
    )


def _value_edit(e: BlockUpdated, args: list[object]) -> str:
    """`, value = <the edit applied>` for a v2 event's span edit (positions in characters)."""
    if e.value_edit is None:
        return ""
    edit = e.value_edit
    args += [edit.at, edit.delete, edit.insert]
    at, delete, insert = (f"${len(args) - i}" for i in (2, 1, 0))
    return f", value = left(value, {at}) || {insert} || substr(value, {at} + {delete} + 1)"


@memory.on(BlockUpdated)
async def block_updated(conn: asyncpg.Connection, e: BlockUpdated, rec: Recorded) -> None:
    args: list[object] = [e.block_id, e.version, rec.envelope.time, rec.seq]
    sets = assignments(e.changes, _BLOCK_FIELDS, args) + _value_edit(e, args)
    value = await conn.fetchval(
        f"UPDATE blocks SET version = $2, updated_at = $3, last_seq = $4{sets}"
        " WHERE id = $1 RETURNING value",
        *args,
    )
    if value is None:
        return
    # A version's changes show the new value whole, whichever way the event said it.
    changes = e.changes | {"value": value} if e.value_edit is not None else e.changes
    await conn.execute(
        "INSERT INTO block_versions (block_id, version, value, changes, actor, agent_id, seq,"
        " created_at, tool_name, restored_from, command_id)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11) ON CONFLICT DO NOTHING",
        e.block_id,
        e.version,
        value,
        changes,
        e.actor,
        e.agent_id,
        rec.seq,
        rec.envelope.time,
        e.tool_name,
        e.restored_from,
        # The command that made this version: delivered again, it finds it here.
        rec.envelope.causation_id,
    )


@memory.on(BlockDeleted)
async def block_deleted(conn: asyncpg.Connection, e: BlockDeleted, rec: Recorded) -> None:
    await conn.execute("DELETE FROM blocks WHERE id = $1", e.block_id)
    await conn.execute("DELETE FROM agent_blocks WHERE block_id = $1", e.block_id)


async def _attach(conn: asyncpg.Connection, agent_id: str, block_id: str, seq: int) -> None:
    await conn.execute(
        "INSERT INTO agent_blocks (agent_id, block_id, position) VALUES ($1, $2, $3)"
        " ON CONFLICT DO NOTHING",
        agent_id,
        block_id,
        seq,
    )


@memory.on(AgentCreated)
async def agent_created(conn: asyncpg.Connection, e: AgentCreated, rec: Recorded) -> None:
    for i, block_id in enumerate(e.block_ids):
        # position keeps the creation order of the agent's blocks
        await _attach(conn, e.agent_id, block_id, position(rec.seq, i))


@memory.on(BlockAttached)
async def block_attached(conn: asyncpg.Connection, e: BlockAttached, rec: Recorded) -> None:
    await _attach(conn, e.agent_id, e.block_id, position(rec.seq))


@memory.on(BlockDetached)
async def block_detached(conn: asyncpg.Connection, e: BlockDetached, rec: Recorded) -> None:
    await conn.execute(
        "DELETE FROM agent_blocks WHERE agent_id = $1 AND block_id = $2", e.agent_id, e.block_id
    )


@memory.on(AgentDeleted)
async def agent_deleted(conn: asyncpg.Connection, e: AgentDeleted, rec: Recorded) -> None:
    # Only the agent's attachments go; its blocks stay (others may share them).
    await conn.execute("DELETE FROM agent_blocks WHERE agent_id = $1", e.agent_id)


@memory.on(AgentUpdated)
async def agent_updated(conn: asyncpg.Connection, e: AgentUpdated, rec: Recorded) -> None:
    # A PATCH with block_ids replaces the agent's set of blocks.
    if "block_ids" not in e.changes:
        return
    await conn.execute("DELETE FROM agent_blocks WHERE agent_id = $1", e.agent_id)
    for i, block_id in enumerate(e.changes["block_ids"]):
        await _attach(conn, e.agent_id, block_id, position(rec.seq, i))
