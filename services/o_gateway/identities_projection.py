"""The gateway's read model of identities and the agents and blocks each has (projection
"identities"; events/identities.py)."""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import IdentityCreated, IdentityDeleted, IdentityUpdated
from o_contracts.projection_names import IDENTITIES
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection, assignments

identities = Projection(
    name=IDENTITIES,
    filter_subject=subjects.IDENTITY_EVENTS,
    tables=["identities", "identity_agents", "identity_blocks"],
)

# IdentityUpdated.changes keys that are columns.
COLUMNS = ("identifier_key", "name", "identity_type", "project_id", "properties")


async def _links(conn: asyncpg.Connection, identity_id: str, table: str, ids: list[str]) -> None:
    column = "agent_id" if table == "identity_agents" else "block_id"
    await conn.execute(f"DELETE FROM {table} WHERE identity_id = $1", identity_id)
    await conn.execute(
        f"INSERT INTO {table} (identity_id, {column}) SELECT $1, unnest($2::text[])"
        " ON CONFLICT DO NOTHING",
        identity_id,
        ids,
    )


@identities.on(IdentityCreated)
async def identity_created(conn: asyncpg.Connection, e: IdentityCreated, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO identities (id, identifier_key, name, identity_type, project_id, properties,"
        " created_at, updated_at, last_seq) VALUES ($1,$2,$3,$4,$5,$6,$7,$7,$8)"
        " ON CONFLICT (id) DO NOTHING",
        e.identity_id,
        e.identifier_key,
        e.name,
        e.identity_type,
        e.project_id,
        e.properties,
        rec.envelope.time,
        rec.seq,
    )
    await _links(conn, e.identity_id, "identity_agents", e.agent_ids)
    await _links(conn, e.identity_id, "identity_blocks", e.block_ids)


@identities.on(IdentityUpdated)
async def identity_updated(conn: asyncpg.Connection, e: IdentityUpdated, rec: Recorded) -> None:
    args: list[object] = [e.identity_id, rec.envelope.time, rec.seq]
    sets = assignments(e.changes, COLUMNS, args)
    await conn.execute(
        f"UPDATE identities SET updated_at = $2, last_seq = $3{sets} WHERE id = $1", *args
    )
    if "agent_ids" in e.changes:
        await _links(conn, e.identity_id, "identity_agents", list(e.changes["agent_ids"]))
    if "block_ids" in e.changes:
        await _links(conn, e.identity_id, "identity_blocks", list(e.changes["block_ids"]))


@identities.on(IdentityDeleted)
async def identity_deleted(conn: asyncpg.Connection, e: IdentityDeleted, rec: Recorded) -> None:
    await conn.execute("DELETE FROM identities WHERE id = $1", e.identity_id)
    await conn.execute("DELETE FROM identity_agents WHERE identity_id = $1", e.identity_id)
    await conn.execute("DELETE FROM identity_blocks WHERE identity_id = $1", e.identity_id)
