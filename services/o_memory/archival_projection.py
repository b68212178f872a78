"""The memory service's archival read model: passages with vectors, access times, reflections."""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    AgentDeleted,
    MemoriesReflected,
    PassageDeleted,
    PassageInserted,
    PassagesAccessed,
)
from o_contracts.events.archival import ArchivalPassage
from o_contracts.projection_names import ARCHIVAL
from o_contracts.vectors import unpack_vector
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection

# Reads every event: archival ones, and AgentDeleted (an agent's archive goes with it).
archival = Projection(
    name=ARCHIVAL,
    filter_subject=subjects.ALL_EVENTS,
    tables=["passages", "archival_effects", "archival_counts", "archival_tag_counts"],
)


async def _count(conn: asyncpg.Connection, agent_id: str, tags: list[str], by: int) -> None:
    """Keep the archive's size and tags (every prompt shows them) without counting passages."""
    await conn.execute(
        "INSERT INTO archival_counts AS c (agent_id, passages) VALUES ($1, $2)"
        " ON CONFLICT (agent_id) DO UPDATE SET passages = c.passages + EXCLUDED.passages",
        agent_id,
        by,
    )
    if tags:
        await conn.execute(
            "INSERT INTO archival_tag_counts AS c (agent_id, tag, passages)"
            " SELECT $1, t, $3 FROM unnest($2::text[]) AS t"
            " ON CONFLICT (agent_id, tag) DO UPDATE SET passages = c.passages + EXCLUDED.passages",
            agent_id,
            sorted(set(tags)),
            by,
        )
        if by < 0:
            await conn.execute(
                "DELETE FROM archival_tag_counts WHERE agent_id = $1 AND passages <= 0", agent_id
            )


async def _effect(conn: asyncpg.Connection, agent_id: str, rec: Recorded) -> None:
    """Remember which command made this event: delivered again, it finds it here."""
    if rec.envelope.causation_id is not None:
        await conn.execute(
            "INSERT INTO archival_effects (command_id, agent_id, seq) VALUES ($1, $2, $3)"
            " ON CONFLICT DO NOTHING",
            rec.envelope.causation_id,
            agent_id,
            rec.seq,
        )


async def _insert(conn: asyncpg.Connection, agent_id: str, p: ArchivalPassage, seq: int) -> None:
    vector = unpack_vector(p.embedding)
    inserted = await conn.fetchval(
        "INSERT INTO passages (id, agent_id, text, tags, importance, importance_source, kind,"
        " sources, embedding_model, dim, embedding, created_at, last_accessed_at, seq)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$12,$13) ON CONFLICT (id) DO NOTHING"
        " RETURNING 1",
        p.passage_id,
        agent_id,
        p.text,
        p.tags,
        p.importance,
        p.importance_source,
        p.kind,
        p.sources,
        p.embedding_model,
        len(vector),
        vector,
        p.created_at,
        seq,
    )
    if inserted:
        await _count(conn, agent_id, p.tags, 1)


@archival.on(PassageInserted)
async def passage_inserted(conn: asyncpg.Connection, e: PassageInserted, rec: Recorded) -> None:
    await _insert(conn, e.agent_id, e.passage, rec.seq)
    await _effect(conn, e.agent_id, rec)


@archival.on(PassageDeleted)
async def passage_deleted(conn: asyncpg.Connection, e: PassageDeleted, rec: Recorded) -> None:
    tags = await conn.fetchval(
        "DELETE FROM passages WHERE id = $1 AND agent_id = $2 RETURNING tags",
        e.passage_id,
        e.agent_id,
    )
    if tags is not None:
        await _count(conn, e.agent_id, list(tags), -1)
    await _effect(conn, e.agent_id, rec)


@archival.on(PassagesAccessed)
async def passages_accessed(conn: asyncpg.Connection, e: PassagesAccessed, rec: Recorded) -> None:
    await conn.execute(
        "UPDATE passages SET last_accessed_at = greatest(last_accessed_at, $3)"
        " WHERE agent_id = $1 AND id = ANY($2)",
        e.agent_id,
        e.passage_ids,
        e.accessed_at,
    )


@archival.on(MemoriesReflected)
async def memories_reflected(conn: asyncpg.Connection, e: MemoriesReflected, rec: Recorded) -> None:
    await conn.execute(
        "UPDATE passages SET reflected = true WHERE agent_id = $1 AND id = ANY($2)",
        e.agent_id,
        e.source_ids,
    )
    for insight in e.insights:
        await _insert(conn, e.agent_id, insight, rec.seq)
    await _effect(conn, e.agent_id, rec)


@archival.on(AgentDeleted)
async def agent_deleted(conn: asyncpg.Connection, e: AgentDeleted, rec: Recorded) -> None:
    # Unlike blocks, passages are never shared, so they go with their agent (as in Letta).
    await conn.execute("DELETE FROM passages WHERE agent_id = $1", e.agent_id)
    await conn.execute("DELETE FROM archival_effects WHERE agent_id = $1", e.agent_id)
    await conn.execute("DELETE FROM archival_counts WHERE agent_id = $1", e.agent_id)
    await conn.execute("DELETE FROM archival_tag_counts WHERE agent_id = $1", e.agent_id)
