"""Reads of the memory projection, shared by the command handlers and the core-memory RPC."""

from __future__ import annotations

from typing import Any

import asyncpg

BLOCK_COLUMNS = (
    'id, label, value, "limit", description, read_only, metadata, tags, version,'
    " created_at, updated_at, last_seq"
)


async def get_block(
    conn: asyncpg.Connection | asyncpg.Pool, block_id: str
) -> dict[str, Any] | None:
    row = await conn.fetchrow(f"SELECT {BLOCK_COLUMNS} FROM blocks WHERE id = $1", block_id)
    return dict(row) if row else None


async def agent_blocks(
    conn: asyncpg.Connection | asyncpg.Pool, agent_id: str
) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        f"SELECT {', '.join('b.' + c.strip() for c in BLOCK_COLUMNS.split(','))}"
        " FROM agent_blocks ab JOIN blocks b ON b.id = ab.block_id"
        " WHERE ab.agent_id = $1 ORDER BY ab.position, b.id",
        agent_id,
    )
    return [dict(r) for r in rows]


async def agent_block_by_label(
    conn: asyncpg.Connection | asyncpg.Pool, agent_id: str, label: str
) -> dict[str, Any] | None:
    for block in await agent_blocks(conn, agent_id):
        if block["label"] == label:
            return block
    return None
