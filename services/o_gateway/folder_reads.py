"""Folders and their files as the gateway reads them (the memory service's "folders"
projection) and renders them (Letta's Folder, FileMetadata, Passage, AgentFileAttachment)."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from o_gateway.render import iso
from o_gateway.state import Gateway

FILE_COLUMNS = (
    "id, folder_id, file_name, original_file_name, file_type, file_size, status, error_message,"
    " total_chunks, chunks_embedded, created_at, updated_at"
)


def render_folder(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "name": row["name"],
        "description": row["description"],
        "instructions": row["instructions"],
        "metadata": row["metadata"],
        "embedding_config": row["embedding_config"],
        "organization_id": None,
        "vector_db_provider": "native",
        "created_by_id": None,
        "last_updated_by_id": None,
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


def short_name(file_name: str) -> str:
    """A file's name without its folder's ("folder/a.md" -> "a.md"), as Letta lists it."""
    return file_name.split("/", 1)[1] if "/" in file_name else file_name


def file_metadata(row: dict[str, Any]) -> dict[str, Any]:
    """A file's fields as Letta's FileMetadata names them, the same in the API's answers and
    in agent files (o_gateway/agent_files/folders_export.py)."""
    return {
        "original_file_name": row["original_file_name"],
        "file_path": None,
        "file_type": row["file_type"],
        "file_size": row["file_size"],
        "file_creation_date": None,
        "file_last_modified_date": None,
        "processing_status": row["status"],
        "error_message": row["error_message"],
        "total_chunks": row["total_chunks"],
        "chunks_embedded": row["chunks_embedded"],
    }


def render_file(
    row: dict[str, Any], *, strip_folder: bool = True, content: str | None = None
) -> dict[str, Any]:
    return {
        "id": row["id"],
        "source_id": row["folder_id"],
        "file_name": short_name(row["file_name"]) if strip_folder else row["file_name"],
        **file_metadata(row),
        "content": content,
        "organization_id": None,
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


def render_chunk(row: dict[str, Any], embedding_config: dict[str, Any]) -> dict[str, Any]:
    """A file's chunk as Letta's Passage of a source."""
    return {
        "id": row["id"],
        "text": row["text"],
        "source_id": row["folder_id"],
        "file_id": row["file_id"],
        "file_name": row["file_name"],
        "agent_id": None,
        "archive_id": None,
        "is_deleted": False,
        "embedding": None,
        "embedding_config": embedding_config,
        "metadata": {},
        "tags": None,
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["created_at"]),
        "created_by_id": None,
        "last_updated_by_id": None,
        "organization_id": None,
    }


async def folder_row(gw: Gateway, folder_id: str) -> dict[str, Any]:
    row = await gw.pool.fetchrow("SELECT * FROM folders WHERE id = $1", folder_id)
    if row is None:
        raise HTTPException(404, f"Folder {folder_id} not found")
    return dict(row)


async def file_row(gw: Gateway, file_id: str, *, content: bool = False) -> dict[str, Any]:
    columns = FILE_COLUMNS + (", content" if content else "")
    row = await gw.pool.fetchrow(f"SELECT {columns} FROM folder_files WHERE id = $1", file_id)
    if row is None:
        raise HTTPException(404, f"File {file_id} not found")
    return dict(row)


async def agent_folder_rows(gw: Gateway, agent_id: str) -> list[dict[str, Any]]:
    """The agent's folders, in the order they were attached."""
    rows = await gw.pool.fetch(
        "SELECT fo.* FROM agent_folders af JOIN folders fo ON fo.id = af.folder_id"
        " WHERE af.agent_id = $1 ORDER BY af.attached_seq",
        agent_id,
    )
    return [dict(r) for r in rows]


_AGENT_FILES = (
    "SELECT f.id AS file_id, f.file_name, f.folder_id, fo.name AS folder_name,"
    " v.file_id IS NOT NULL AS is_open, v.visible_content, v.start_line, v.end_line,"
    " coalesce(v.opened_at, af.attached_at) AS last_accessed_at"
    " FROM agent_folders af JOIN folders fo ON fo.id = af.folder_id"
    " JOIN folder_files f ON f.folder_id = af.folder_id AND f.status = 'completed'"
    " LEFT JOIN agent_file_views v ON v.agent_id = af.agent_id AND v.file_id = f.id"
    " WHERE af.agent_id = $1 ORDER BY af.attached_seq, f.created_at, f.id"
)


async def agent_file_rows(gw: Gateway, agent_id: str) -> list[dict[str, Any]]:
    """The processed files of the agent's folders, open or closed, with its window of each."""
    return [dict(r) for r in await gw.pool.fetch(_AGENT_FILES, agent_id)]
