"""The memory service's archival read model: passages with vectors, access times, reflections."""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    AgentDeleted,
    ArchiveAttached,
    ArchiveCreated,
    ArchiveDeleted,
    ArchiveDetached,
    ArchivePassageDeleted,
    ArchivePassagesInserted,
    ArchiveUpdated,
    MemoriesReflected,
    PassageDeleted,
    PassageInserted,
    PassagesAccessed,
)
from o_contracts.events.archival import ArchivalPassage
from o_contracts.projection_names import ARCHIVAL
from o_contracts.vectors import unpack_vector
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection, assignments

# Reads every event: archival ones, archives' (events/archives.py), and AgentDeleted (an
# agent's own passages go with it). Archives and their passages are one projection, so a
# passage is never recorded under an archive this projection has seen deleted.
archival = Projection(
    name=ARCHIVAL,
    filter_subject=subjects.ALL_EVENTS,
    tables=[
        "passages",
        "archival_effects",
        "archival_counts",
        "archival_tag_counts",
        "archives",
        "archive_agents",
    ],
)


async def _count(conn: asyncpg.Connection, agent_id: str, tags: list[str], by: int) -> None:
    """Keep the archive's size and tags (every prompt shows them) without counting passages.

    `agent_id` is whose passages they are: an agent's own, or an archive's (its id)."""
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


async def _insert(
    conn: asyncpg.Connection,
    agent_id: str | None,
    p: ArchivalPassage,
    seq: int,
    archive_id: str | None = None,
) -> None:
    vector = unpack_vector(p.embedding)
    inserted = await conn.fetchval(
        "INSERT INTO passages (id, agent_id, text, tags, importance, importance_source, kind,"
        " sources, embedding_model, dim, embedding, created_at, last_accessed_at, seq,"
        " archive_id, metadata)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$12,$13,$14,$15)"
        " ON CONFLICT (id) DO NOTHING RETURNING 1",
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
        archive_id,
        p.metadata,
    )
    if inserted:
        await _count(conn, archive_id or agent_id or "", p.tags, 1)


async def _delete(
    conn: asyncpg.Connection, passage_id: str, owner: str, whose: str, rec: Recorded
) -> None:
    """Delete a passage of `owner` (an agent's own: `whose` names them by $2, or an
    archive's), keeping its counts, and record the command that did it."""
    tags = await conn.fetchval(
        f"DELETE FROM passages WHERE id = $1 AND {whose} RETURNING tags", passage_id, owner
    )
    if tags is not None:
        await _count(conn, owner, list(tags), -1)
    await _effect(conn, owner, rec)


@archival.on(PassageInserted)
async def passage_inserted(conn: asyncpg.Connection, e: PassageInserted, rec: Recorded) -> None:
    await _insert(conn, e.agent_id, e.passage, rec.seq)
    await _effect(conn, e.agent_id, rec)


@archival.on(PassageDeleted)
async def passage_deleted(conn: asyncpg.Connection, e: PassageDeleted, rec: Recorded) -> None:
    await _delete(conn, e.passage_id, e.agent_id, "agent_id = $2 AND archive_id IS NULL", rec)


@archival.on(PassagesAccessed)
async def passages_accessed(conn: asyncpg.Connection, e: PassagesAccessed, rec: Recorded) -> None:
    # (An archive's passages found by any agent sharing it: their access time is shared.)
    await conn.execute(
        "UPDATE passages SET last_accessed_at = greatest(last_accessed_at, $3)"
        " WHERE (agent_id = $1 OR archive_id IS NOT NULL) AND id = ANY($2)",
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
    # The agent's own passages go with it (as in Letta); what it wrote into an archive
    # stays there, for the agents that share it.
    await conn.execute(
        "DELETE FROM passages WHERE agent_id = $1 AND archive_id IS NULL", e.agent_id
    )
    await conn.execute("DELETE FROM archival_effects WHERE agent_id = $1", e.agent_id)
    await conn.execute("DELETE FROM archival_counts WHERE agent_id = $1", e.agent_id)
    await conn.execute("DELETE FROM archival_tag_counts WHERE agent_id = $1", e.agent_id)
    await conn.execute("DELETE FROM archive_agents WHERE agent_id = $1", e.agent_id)


# -- archives (events/archives.py) -----------------------------------------------------


@archival.on(ArchiveCreated)
async def archive_created(conn: asyncpg.Connection, e: ArchiveCreated, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO archives (id, name, description, embedding_model, created_at, updated_at,"
        " last_seq) VALUES ($1,$2,$3,$4,$5,$5,$6) ON CONFLICT (id) DO NOTHING",
        e.archive_id,
        e.name,
        e.description,
        e.embedding_model,
        rec.envelope.time,
        rec.seq,
    )
    await _effect(conn, e.archive_id, rec)


@archival.on(ArchiveUpdated)
async def archive_updated(conn: asyncpg.Connection, e: ArchiveUpdated, rec: Recorded) -> None:
    # (An update that changed nothing is recorded for its command's sake: it leaves
    # `updated_at` as it was.)
    args: list[object] = [e.archive_id, rec.seq]
    if e.changes:
        args.append(rec.envelope.time)
    sets = assignments(e.changes, ("name", "description"), args)
    touched = ", updated_at = $3" if e.changes else ""
    await conn.execute(f"UPDATE archives SET last_seq = $2{touched}{sets} WHERE id = $1", *args)
    await _effect(conn, e.archive_id, rec)


@archival.on(ArchiveDeleted)
async def archive_deleted(conn: asyncpg.Connection, e: ArchiveDeleted, rec: Recorded) -> None:
    await conn.execute("DELETE FROM archives WHERE id = $1", e.archive_id)
    await conn.execute("DELETE FROM archive_agents WHERE archive_id = $1", e.archive_id)
    await conn.execute("DELETE FROM passages WHERE archive_id = $1", e.archive_id)
    await conn.execute("DELETE FROM archival_counts WHERE agent_id = $1", e.archive_id)
    await conn.execute("DELETE FROM archival_tag_counts WHERE agent_id = $1", e.archive_id)
    await _effect(conn, e.archive_id, rec)


@archival.on(ArchiveAttached)
async def archive_attached(conn: asyncpg.Connection, e: ArchiveAttached, rec: Recorded) -> None:
    # (On a subject apart from the archive's: one deleted just before is not attached.)
    await conn.execute(
        "INSERT INTO archive_agents (archive_id, agent_id, attached_seq)"
        " SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM archives WHERE id = $1)"
        " ON CONFLICT DO NOTHING",
        e.archive_id,
        e.agent_id,
        rec.seq,
    )
    await _effect(conn, e.archive_id, rec)


@archival.on(ArchiveDetached)
async def archive_detached(conn: asyncpg.Connection, e: ArchiveDetached, rec: Recorded) -> None:
    await conn.execute(
        "DELETE FROM archive_agents WHERE archive_id = $1 AND agent_id = $2",
        e.archive_id,
        e.agent_id,
    )
    await _effect(conn, e.archive_id, rec)


@archival.on(ArchivePassagesInserted)
async def archive_passages_inserted(
    conn: asyncpg.Connection, e: ArchivePassagesInserted, rec: Recorded
) -> None:
    # (Decided on the archive's subject, so never after its deletion; checked all the same,
    # as a passage of no archive would be no agent's.)
    if await conn.fetchval("SELECT 1 FROM archives WHERE id = $1", e.archive_id):
        for p in e.passages:
            await _insert(conn, e.agent_id, p, rec.seq, e.archive_id)
    await _effect(conn, e.archive_id, rec)


@archival.on(ArchivePassageDeleted)
async def archive_passage_deleted(
    conn: asyncpg.Connection, e: ArchivePassageDeleted, rec: Recorded
) -> None:
    await _delete(conn, e.passage_id, e.archive_id, "archive_id = $2", rec)
