"""The memory service's read model of folders (projection "folders"): folders, their files
and how far each got, the chunks with their vectors, which agent has which folder, and
each agent's open files.

Reads every event: folders' and files' (o.evt.folder.>), agents' file views, and from
the agents' subjects FolderAttached, FolderDetached and AgentDeleted. What a handler
computes (a file's text joined from its chunks, an open file's window) depends only on
events before it in the log, so a rebuild gives the same rows.
"""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    AgentDeleted,
    FileChunksEmbedded,
    FileDeleted,
    FileFailed,
    FileParsed,
    FileProcessed,
    FileProcessingStarted,
    FilesClosed,
    FilesOpened,
    FileUploaded,
    FolderAttached,
    FolderCreated,
    FolderDeleted,
    FolderDetached,
    FolderUpdated,
)
from o_contracts.file_types import of_mime
from o_contracts.ids import derived_id
from o_contracts.projection_names import FOLDERS
from o_contracts.vectors import unpack_vector
from o_memory.files.lines import visible_content
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection, assignments

folders = Projection(
    name=FOLDERS,
    filter_subject=subjects.ALL_EVENTS,
    tables=[
        "folders",
        "folder_files",
        "folder_file_chunks",
        "agent_folders",
        "agent_file_views",
        "agent_file_effects",
    ],
)

# How much of an open file's window is kept (an agent's prompt shows at most its
# per-file limit of it, 40,000 characters at most by default).
MAX_VISIBLE_CHARS = 200_000
FOLDER_COLUMNS = ("name", "description", "instructions", "metadata")


def chunk_id(file_id: str, index: int) -> str:
    """A chunk's id: from its file and place, so a batch applied twice is one row each."""
    return derived_id("passage", file_id, "chunk", str(index))


async def _drop_files(conn: asyncpg.Connection, where: str, value: str) -> None:
    """Files (chunks and agents' views of them included) matching `where` ($1)."""
    ids = [r["id"] for r in await conn.fetch(f"SELECT id FROM folder_files WHERE {where}", value)]
    if ids:
        await conn.execute("DELETE FROM agent_file_views WHERE file_id = ANY($1)", ids)
        await conn.execute("DELETE FROM folder_file_chunks WHERE file_id = ANY($1)", ids)
        await conn.execute("DELETE FROM folder_files WHERE id = ANY($1)", ids)


@folders.on(FolderCreated)
async def folder_created(conn: asyncpg.Connection, e: FolderCreated, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO folders (id, name, description, instructions, metadata, embedding_config,"
        " created_at, updated_at, last_seq) VALUES ($1,$2,$3,$4,$5,$6,$7,$7,$8)"
        " ON CONFLICT (id) DO NOTHING",
        e.folder_id,
        e.name,
        e.description,
        e.instructions,
        e.metadata,
        e.embedding_config,
        rec.envelope.time,
        rec.seq,
    )


@folders.on(FolderUpdated)
async def folder_updated(conn: asyncpg.Connection, e: FolderUpdated, rec: Recorded) -> None:
    args: list[object] = [e.folder_id, rec.envelope.time, rec.seq]
    await conn.execute(
        f"UPDATE folders SET updated_at = $2, last_seq = $3"
        f"{assignments(e.changes, FOLDER_COLUMNS, args)} WHERE id = $1",
        *args,
    )


@folders.on(FolderDeleted)
async def folder_deleted(conn: asyncpg.Connection, e: FolderDeleted, rec: Recorded) -> None:
    await _drop_files(conn, "folder_id = $1", e.folder_id)
    await conn.execute("DELETE FROM agent_folders WHERE folder_id = $1", e.folder_id)
    await conn.execute("DELETE FROM folders WHERE id = $1", e.folder_id)


@folders.on(FileUploaded)
async def file_uploaded(conn: asyncpg.Connection, e: FileUploaded, rec: Recorded) -> None:
    if e.replaces_file_id:
        await _drop_files(conn, "id = $1", e.replaces_file_id)
    await conn.execute(
        "INSERT INTO folder_files (id, folder_id, file_name, original_file_name, file_type,"
        " file_size, sha256, status, created_at, updated_at, parsed_text)"
        " SELECT $1,$2,$3,$4,$5,$6,$7,'pending',$8,$8,$9 WHERE EXISTS"
        " (SELECT 1 FROM folders WHERE id = $2) ON CONFLICT (id) DO NOTHING",
        e.file_id,
        e.folder_id,
        e.file_name,
        e.original_file_name,
        e.file_type,
        e.file_size,
        e.sha256,
        rec.envelope.time,
        e.parsed_text,
    )
    await conn.execute("UPDATE folders SET last_seq = $2 WHERE id = $1", e.folder_id, rec.seq)


@folders.on(FileDeleted)
async def file_deleted(conn: asyncpg.Connection, e: FileDeleted, rec: Recorded) -> None:
    await _drop_files(conn, "id = $1", e.file_id)
    await conn.execute("UPDATE folders SET last_seq = $2 WHERE id = $1", e.folder_id, rec.seq)


async def _step(
    conn: asyncpg.Connection, file_id: str, rec: Recorded, sets: str, *args: object
) -> None:
    """One processing step of a file that still exists: `sets` from $3 on."""
    await conn.execute(
        f"UPDATE folder_files SET file_seq = $2, updated_at = ${len(args) + 3}, {sets}"
        " WHERE id = $1",
        file_id,
        rec.seq,
        *args,
        rec.envelope.time,
    )


@folders.on(FileProcessingStarted)
async def processing_started(
    conn: asyncpg.Connection, e: FileProcessingStarted, rec: Recorded
) -> None:
    await _step(conn, e.file_id, rec, "status = 'parsing'")


@folders.on(FileParsed)
async def file_parsed(conn: asyncpg.Connection, e: FileParsed, rec: Recorded) -> None:
    await _step(
        conn,
        e.file_id,
        rec,
        "status = 'embedding', total_chunks = $3, chunks_embedded = 0, pages = $4, chars = $5,"
        " text_sha256 = $6, embedding_model = $7, chunk_ends = $8",
        len(e.chunk_ends),
        e.pages,
        e.chars,
        e.text_sha256,
        e.embedding_model,
        e.chunk_ends,
    )


@folders.on(FileChunksEmbedded)
async def chunks_embedded(conn: asyncpg.Connection, e: FileChunksEmbedded, rec: Recorded) -> None:
    if not await conn.fetchval("SELECT 1 FROM folder_files WHERE id = $1", e.file_id):
        return  # deleted meanwhile: its late chunks are not kept
    rows = []
    for c in e.chunks:
        vector = unpack_vector(c.embedding)
        rows.append(
            (
                chunk_id(e.file_id, c.index),
                e.file_id,
                e.folder_id,
                c.index,
                c.text,
                e.embedding_model,
                len(vector),
                vector,
            )
        )
    await conn.executemany(
        "INSERT INTO folder_file_chunks (id, file_id, folder_id, idx, text, embedding_model,"
        " dim, embedding) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT (id) DO NOTHING",
        rows,
    )
    # Counted, not added up: a chunk already there is not counted twice.
    await _step(
        conn,
        e.file_id,
        rec,
        "chunks_embedded = (SELECT count(*) FROM folder_file_chunks WHERE file_id = $1)",
    )


@folders.on(FileProcessed)
async def file_processed(conn: asyncpg.Connection, e: FileProcessed, rec: Recorded) -> None:
    await _step(
        conn,
        e.file_id,
        rec,
        "status = 'completed', content = coalesce((SELECT string_agg(text, '' ORDER BY idx)"
        " FROM folder_file_chunks WHERE file_id = $1), '')",
    )


@folders.on(FileFailed)
async def file_failed(conn: asyncpg.Connection, e: FileFailed, rec: Recorded) -> None:
    await _step(conn, e.file_id, rec, "status = 'error', error_message = $3", e.error)


@folders.on(FolderAttached)
async def folder_attached(conn: asyncpg.Connection, e: FolderAttached, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO agent_folders (agent_id, folder_id, attached_at, attached_seq)"
        " SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM folders WHERE id = $2)"
        " ON CONFLICT DO NOTHING",
        e.agent_id,
        e.folder_id,
        rec.envelope.time,
        rec.seq,
    )


@folders.on(FolderDetached)
async def folder_detached(conn: asyncpg.Connection, e: FolderDetached, rec: Recorded) -> None:
    await conn.execute(
        "DELETE FROM agent_file_views WHERE agent_id = $1 AND folder_id = $2",
        e.agent_id,
        e.folder_id,
    )
    await conn.execute(
        "DELETE FROM agent_folders WHERE agent_id = $1 AND folder_id = $2",
        e.agent_id,
        e.folder_id,
    )


async def _effect(conn: asyncpg.Connection, agent_id: str, rec: Recorded) -> None:
    """Which command made this event: delivered again, it finds its outcome here."""
    if rec.envelope.causation_id is not None:
        await conn.execute(
            "INSERT INTO agent_file_effects (command_id, agent_id, seq) VALUES ($1, $2, $3)"
            " ON CONFLICT DO NOTHING",
            rec.envelope.causation_id,
            agent_id,
            rec.seq,
        )


# A file the agent may open: processed, in one of its folders.
_OPENABLE = (
    "SELECT f.id, f.folder_id, f.file_name, f.file_type, f.content FROM folder_files f"
    " JOIN agent_folders af ON af.folder_id = f.folder_id AND af.agent_id = $1"
    " WHERE f.id = ANY($2) AND f.status = 'completed'"
)


@folders.on(FilesOpened)
async def files_opened(conn: asyncpg.Connection, e: FilesOpened, rec: Recorded) -> None:
    if e.closed:
        await conn.execute(
            "DELETE FROM agent_file_views WHERE agent_id = $1 AND file_id = ANY($2)",
            e.agent_id,
            e.closed,
        )
    found = {
        r["id"]: r for r in await conn.fetch(_OPENABLE, e.agent_id, [v.file_id for v in e.opened])
    }
    rows = []
    for view in e.opened:
        file = found.get(view.file_id)
        if file is None:  # detached or deleted since it was decided
            continue
        content = visible_content(
            file["content"] or "",
            file["file_name"],
            of_mime(file["file_type"]).view,
            view.start_line,
            view.end_line,
            MAX_VISIBLE_CHARS,
        )
        rows.append(
            (
                e.agent_id,
                view.file_id,
                file["folder_id"],
                view.start_line,
                view.end_line,
                content,
                rec.envelope.time,
                rec.seq,
            )
        )
    await conn.executemany(
        "INSERT INTO agent_file_views (agent_id, file_id, folder_id, start_line, end_line,"
        " visible_content, opened_at, opened_seq) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)"
        " ON CONFLICT (agent_id, file_id) DO UPDATE SET start_line = EXCLUDED.start_line,"
        " end_line = EXCLUDED.end_line, visible_content = EXCLUDED.visible_content,"
        " opened_at = EXCLUDED.opened_at, opened_seq = EXCLUDED.opened_seq",
        rows,
    )
    await _effect(conn, e.agent_id, rec)


@folders.on(FilesClosed)
async def files_closed(conn: asyncpg.Connection, e: FilesClosed, rec: Recorded) -> None:
    await conn.execute(
        "DELETE FROM agent_file_views WHERE agent_id = $1 AND file_id = ANY($2)",
        e.agent_id,
        e.file_ids,
    )
    await _effect(conn, e.agent_id, rec)


@folders.on(AgentDeleted)
async def agent_deleted(conn: asyncpg.Connection, e: AgentDeleted, rec: Recorded) -> None:
    for table in ("agent_file_views", "agent_folders", "agent_file_effects"):
        await conn.execute(f"DELETE FROM {table} WHERE agent_id = $1", e.agent_id)
