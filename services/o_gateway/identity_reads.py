"""Identities as Letta's API shows them, and the identity filters of the agent and block
lists (projection "identities"; events/identities.py)."""

from __future__ import annotations

from typing import Any

import asyncpg
from fastapi import HTTPException

from o_gateway.pagination import Listing
from o_gateway.render import ORGANIZATION_ID

# An identity's row with the live agents and blocks it has.
_WITH_LINKS = (
    "SELECT i.*,"
    " coalesce((SELECT array_agg(ia.agent_id ORDER BY ia.agent_id) FROM identity_agents ia"
    "  JOIN agents a ON a.id = ia.agent_id WHERE ia.identity_id = i.id), '{}') AS agent_ids,"
    " coalesce((SELECT array_agg(ib.block_id ORDER BY ib.block_id) FROM identity_blocks ib"
    "  JOIN blocks b ON b.id = ib.block_id WHERE ib.identity_id = i.id), '{}') AS block_ids"
    " FROM identities i"
)


def identity_json(row: asyncpg.Record | dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "identifier_key": row["identifier_key"],
        "name": row["name"],
        "identity_type": row["identity_type"],
        "project_id": row["project_id"],
        # (Letta's deprecated lists, always [] there; O fills them.)
        "agent_ids": list(row["agent_ids"]),
        "block_ids": list(row["block_ids"]),
        "organization_id": ORGANIZATION_ID,
        # (In Letta's key order: jsonb keeps its own.)
        "properties": [
            {"key": p.get("key"), "value": p.get("value"), "type": p.get("type")}
            for p in row["properties"] or []
        ],
    }


async def identity_row(conn: asyncpg.Pool | asyncpg.Connection, identity_id: str) -> Any:
    row = await conn.fetchrow(f"{_WITH_LINKS} WHERE i.id = $1", identity_id)
    if row is None:
        raise HTTPException(404, f"Identity {identity_id} not found")
    return row


async def identity_rows(conn: asyncpg.Pool | asyncpg.Connection, ids: list[str]) -> list[Any]:
    """The identities `ids` (those that exist), in created order."""
    rows: list[Any] = await conn.fetch(
        f"{_WITH_LINKS} WHERE i.id = ANY($1) ORDER BY i.created_at, i.id", ids
    )
    return rows


async def identities_of_agent(
    conn: asyncpg.Pool | asyncpg.Connection, agent_id: str
) -> list[dict[str, Any]]:
    """Letta's AgentState.identities: the identities the agent has."""
    rows = await conn.fetch(
        f"{_WITH_LINKS} WHERE i.id IN (SELECT identity_id FROM identity_agents"
        " WHERE agent_id = $1) ORDER BY i.created_at, i.id",
        agent_id,
    )
    return [identity_json(r) for r in rows]


def by_identity(
    q: Listing, table: str, identity_id: str | None, identifier_keys: list[str] | None
) -> Listing:
    """Letta's `identity_id` and `identifier_keys` filters of the agent (`identity_agents`)
    and block (`identity_blocks`) lists."""
    column = "agent_id" if table == "identity_agents" else "block_id"
    if identity_id is not None and identifier_keys:
        # (Both: one identity must be that one and have one of the keys, as in Letta.)
        q.filter(
            f"id IN (SELECT l.{column} FROM {table} l JOIN identities i ON i.id = l.identity_id"
            " WHERE i.id = {} AND i.identifier_key = ANY({}))",
            identity_id,
            identifier_keys,
        )
    elif identity_id is not None:
        q.filter(f"id IN (SELECT {column} FROM {table} WHERE identity_id = {{}})", identity_id)
    elif identifier_keys:
        q.filter(
            f"id IN (SELECT l.{column} FROM {table} l JOIN identities i ON i.id = l.identity_id"
            " WHERE i.identifier_key = ANY({}))",
            identifier_keys,
        )
    return q
