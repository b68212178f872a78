"""Folders and their files: `/v1/folders/` and Letta's older `/v1/sources/` names (the
same routes twice).

Writes are decided here on the folder's subject (folder_decisions.py); an upload's bytes
go to the file store first, then FileUploaded is appended and the file is answered
`pending`: the memory service parses, chunks and embeds it afterwards (docs/folders.md),
so an upload never waits for its processing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

import asyncpg
from fastapi import APIRouter, HTTPException, Query, Response, UploadFile
from fastapi.responses import JSONResponse
from pydantic import Field

from o_contracts.base import Event
from o_contracts.events import (
    FileDeleted,
    FileUploaded,
    FolderCreated,
    FolderDeleted,
    FolderUpdated,
)
from o_contracts.file_types import SUPPORTED, file_type
from o_contracts.ids import new_id
from o_gateway.folder_decisions import on_folder
from o_gateway.folder_reads import (
    FILE_COLUMNS,
    file_row,
    folder_row,
    render_chunk,
    render_file,
    render_folder,
)
from o_gateway.models_config import LOCAL_EMBEDDING, embedding_config_for
from o_gateway.pagination import Listing, page_of
from o_gateway.routes.paths import route
from o_gateway.schemas import Body, Description, Object, Text
from o_gateway.state import GW, checked_id
from o_runtime.file_store import file_store

router = APIRouter()
PREFIXES = ("/v1/folders", "/v1/sources")
MAX_FILE_NAME = 255
FolderName = Annotated[str, Field(min_length=1, max_length=256)]
ChunkSize = Annotated[int, Field(ge=16, le=2000)]


class CreateFolderBody(Body):
    name: FolderName
    description: Description | None = None
    instructions: Text | None = None
    metadata: Object | None = None
    embedding: Annotated[str, Field(max_length=256)] | None = None
    embedding_chunk_size: ChunkSize | None = None
    embedding_config: Object | None = None


class UpdateFolderBody(Body):
    name: FolderName | None = None
    description: Description | None = None
    instructions: Text | None = None
    metadata: Object | None = None
    # Accepted and kept as it was: chunks already embedded decide the folder's model.
    embedding_config: Object | None = None


def each_prefix(method: str, path: str, **kwargs: Any) -> Callable[[Any], Any]:
    """Register a route under both names (/v1/folders and /v1/sources)."""

    def register(fn: Any) -> Any:
        for prefix in PREFIXES:
            route(router, method, prefix + path, **kwargs)(fn)
        return fn

    return register


def embedding_config(body: CreateFolderBody) -> dict[str, Any]:
    chunk = body.embedding_chunk_size
    if body.embedding_config:
        config = dict(body.embedding_config)
        if not config.get("handle"):
            kind, model = config.get("embedding_endpoint_type"), config.get("embedding_model")
            if not isinstance(kind, str) or not isinstance(model, str) or not model:
                raise HTTPException(
                    422,
                    "embedding_config needs a handle, or embedding_endpoint_type and"
                    " embedding_model",
                )
            config["handle"] = f"{kind}/{model}"
        config.setdefault("embedding_chunk_size", chunk or 300)
        return config
    if body.embedding and not body.embedding.startswith("local/"):
        return embedding_config_for(body.embedding) | {"embedding_chunk_size": chunk or 300}
    return LOCAL_EMBEDDING | ({"embedding_chunk_size": chunk} if chunk else {})


async def _name_free(conn: asyncpg.Connection, name: str, folder_id: str | None = None) -> None:
    other = await conn.fetchval("SELECT id FROM folders WHERE name = $1 LIMIT 1", name)
    if other is not None and other != folder_id:
        raise HTTPException(409, f"a folder named '{name}' already exists")


@each_prefix("GET", "/count")
async def count_folders(gw: GW) -> int:
    n: int = await gw.pool.fetchval("SELECT count(*) FROM folders")
    return n


@each_prefix("GET", "/metadata")
async def folders_metadata(
    gw: GW, include_detailed_per_source_metadata: bool = False
) -> dict[str, Any]:
    folders = await gw.pool.fetch("SELECT id, name FROM folders ORDER BY created_at, id")
    files = await gw.pool.fetch(
        "SELECT id, folder_id, file_name, file_size FROM folder_files ORDER BY created_at, id"
    )
    by_folder: dict[str, list[asyncpg.Record]] = {}
    for f in files:
        by_folder.setdefault(f["folder_id"], []).append(f)
    sources = []
    for folder in folders:
        own = by_folder.get(folder["id"], [])
        sources.append(
            {
                "source_id": folder["id"],
                "source_name": folder["name"],
                "file_count": len(own),
                "total_size": sum(f["file_size"] for f in own),
                "files": [
                    {"file_id": f["id"], "file_name": f["file_name"], "file_size": f["file_size"]}
                    for f in own
                ]
                if include_detailed_per_source_metadata
                else [],
            }
        )
    return {
        "total_sources": len(folders),
        "total_files": len(files),
        "total_size": sum(f["file_size"] for f in files),
        "sources": sources,
    }


@each_prefix("GET", "/name/{folder_name}")
async def folder_id_by_name(folder_name: str, gw: GW) -> str:
    found: str | None = await gw.pool.fetchval(
        "SELECT id FROM folders WHERE name = $1 ORDER BY created_at LIMIT 1", folder_name
    )
    if found is None:
        raise HTTPException(404, f"Folder named '{folder_name}' not found")
    return found


@each_prefix("GET", "/")
async def list_folders(
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "asc",
    order_by: Literal["created_at"] = "created_at",
    name: str | None = None,
) -> list[dict[str, Any]]:
    listing = Listing("folders")
    if name is not None:
        listing.filter("name = {}", name)
    rows = await listing.page(gw.pool, "source", before, after, order, limit)
    return [render_folder(dict(r)) for r in rows]


@each_prefix("POST", "/")
async def create_folder(body: CreateFolderBody, gw: GW) -> dict[str, Any]:
    folder_id = new_id("source")
    config = embedding_config(body)

    async def decide(conn: asyncpg.Connection) -> Event | None:
        await _name_free(conn, body.name)
        return FolderCreated(
            folder_id=folder_id,
            name=body.name,
            description=body.description,
            instructions=body.instructions,
            metadata=body.metadata,
            embedding_config=config,
        )

    await on_folder(gw, folder_id, decide)
    return render_folder(await folder_row(gw, folder_id))


@each_prefix("GET", "/{folder_id}")
async def retrieve_folder(folder_id: str, gw: GW) -> dict[str, Any]:
    return render_folder(await folder_row(gw, checked_id(folder_id, "source")))


@each_prefix("PATCH", "/{folder_id}")
async def modify_folder(folder_id: str, body: UpdateFolderBody, gw: GW) -> dict[str, Any]:
    checked_id(folder_id, "source")
    sent = body.model_dump(exclude_unset=True, exclude={"embedding_config"})
    changes = {k: v for k, v in sent.items() if v is not None}

    async def decide(conn: asyncpg.Connection) -> Event | None:
        row = await conn.fetchrow("SELECT * FROM folders WHERE id = $1", folder_id)
        if row is None:
            raise HTTPException(404, f"Folder {folder_id} not found")
        if "name" in changes:
            await _name_free(conn, changes["name"], folder_id)
        changed = {k: v for k, v in changes.items() if row[k] != v}
        return FolderUpdated(folder_id=folder_id, changes=changed) if changed else None

    await on_folder(gw, folder_id, decide)
    return render_folder(await folder_row(gw, folder_id))


@each_prefix("DELETE", "/{folder_id}")
async def delete_folder(folder_id: str, gw: GW) -> None:
    """The folder, its files and chunks; agents no longer see it (their file tools stay,
    as in Letta)."""
    checked_id(folder_id, "source")

    async def decide(conn: asyncpg.Connection) -> Event | None:
        if not await conn.fetchval("SELECT 1 FROM folders WHERE id = $1", folder_id):
            raise HTTPException(404, f"Folder {folder_id} not found")
        return FolderDeleted(folder_id=folder_id)

    await on_folder(gw, folder_id, decide)


def clean_name(name: str) -> str:
    """An uploaded file's name: its last path part, without control characters."""
    base = os.path.basename(name.replace("\\", "/"))
    base = re.sub(r"[\x00-\x1f\x7f]", "", base).strip()
    if len(base) > MAX_FILE_NAME:
        stem, ext = os.path.splitext(base)
        base = stem[: MAX_FILE_NAME - len(ext)] + ext
    return base


async def _taken(conn: asyncpg.Connection, folder_id: str, file_name: str) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT 1 FROM folder_files WHERE folder_id = $1 AND file_name = $2",
            folder_id,
            file_name,
        )
    )


async def unique_name(conn: asyncpg.Connection, folder: dict[str, Any], original: str) -> str:
    """Letta's naming: "<folder>/<name>", or "<folder>/<stem>_(n)<ext>" when n files of that
    name are there already."""
    count = await conn.fetchval(
        "SELECT count(*) FROM folder_files WHERE folder_id = $1 AND original_file_name = $2",
        folder["id"],
        original,
    )
    stem, ext = os.path.splitext(original)
    name = (
        f"{folder['name']}/{original}" if not count else f"{folder['name']}/{stem}_({count}){ext}"
    )
    while await _taken(conn, folder["id"], name):
        count += 1
        name = f"{folder['name']}/{stem}_({count}){ext}"
    return name


@each_prefix("POST", "/{folder_id}/upload")
async def upload_file_to_folder(
    folder_id: str,
    file: UploadFile,
    gw: GW,
    duplicate_handling: Literal["skip", "error", "suffix", "replace"] = "suffix",
    name: Annotated[str, Query(max_length=MAX_FILE_NAME)] | None = None,
) -> Any:
    checked_id(folder_id, "source")
    folder = await folder_row(gw, folder_id)
    kind = file_type(file.filename, file.content_type)
    if kind is None:
        media = (file.content_type or "").split(";", 1)[0].strip() or "unknown"
        raise HTTPException(
            415,
            f"Unsupported file type: {media} (filename: {file.filename}). Supported types:"
            f" {SUPPORTED}.",
        )
    limit = gw.settings.max_file_bytes
    data = await file.read(limit + 1)
    if len(data) > limit:
        raise HTTPException(
            413, f"the file is over the upload limit of {limit} bytes (O_MAX_FILE_BYTES)"
        )
    original = clean_name(name or file.filename or "")
    if not original:
        raise HTTPException(400, "the file needs a name (the upload's filename, or ?name=)")
    # The bytes first: the event that names them is appended only once they are stored.
    sha256 = await (await file_store(gw.eventlog)).put(data)
    file_id = new_id("file")
    skipped: list[dict[str, Any]] = []

    async def decide(conn: asyncpg.Connection) -> Event | None:
        skipped.clear()
        existing = await conn.fetchrow(
            f"SELECT {FILE_COLUMNS} FROM folder_files WHERE folder_id = $1"
            " AND original_file_name = $2 ORDER BY created_at DESC LIMIT 1",
            folder_id,
            original,
        )
        replaces = None
        if existing is not None and duplicate_handling == "error":
            raise HTTPException(
                400, f"File '{original}' already exists in folder '{folder['name']}'"
            )
        if existing is not None and duplicate_handling == "skip":
            skipped.append(dict(existing))
            return None
        if existing is not None and duplicate_handling == "replace":
            replaces, file_name = existing["id"], existing["file_name"]
        else:
            file_name = await unique_name(conn, folder, original)
        return FileUploaded(
            folder_id=folder_id,
            file_id=file_id,
            file_name=file_name,
            original_file_name=original,
            file_type=kind.mime_type,
            file_size=len(data),
            sha256=sha256,
            replaces_file_id=replaces,
        )

    await on_folder(gw, folder_id, decide)
    if skipped:
        return JSONResponse(
            render_file(skipped[0], strip_folder=False), headers={"X-Upload-Result": "skipped"}
        )
    # Letta answers with the file as the upload made it: pending, processing not yet begun.
    # The projected row may already be further on (the memory service is quick), so its
    # processing fields are reset to what the upload recorded.
    uploaded = await file_row(gw, file_id)
    as_uploaded = {
        **uploaded,
        "status": "pending",
        "error_message": None,
        "total_chunks": None,
        "chunks_embedded": None,
        "updated_at": uploaded["created_at"],
    }
    return render_file(as_uploaded, strip_folder=False)


@each_prefix("GET", "/{folder_id}/agents")
async def list_agents_for_folder(
    folder_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
) -> list[str]:
    await folder_row(gw, checked_id(folder_id, "source"))
    rows = await gw.pool.fetch(
        "SELECT agent_id FROM agent_folders WHERE folder_id = $1 ORDER BY attached_seq",
        folder_id,
    )
    return page_of([r["agent_id"] for r in rows], lambda a: a, before, after, order, limit)


@each_prefix("GET", "/{folder_id}/passages")
async def list_folder_passages(
    folder_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
) -> list[dict[str, Any]]:
    folder = await folder_row(gw, checked_id(folder_id, "source"))
    rows = await gw.pool.fetch(
        "SELECT c.id, c.text, c.folder_id, c.file_id, f.file_name, f.created_at"
        " FROM folder_file_chunks c JOIN folder_files f ON f.id = c.file_id"
        " WHERE c.folder_id = $1 ORDER BY f.created_at, f.id, c.idx",
        folder_id,
    )
    chunks = [render_chunk(dict(r), folder["embedding_config"]) for r in rows]
    return page_of(chunks, lambda c: str(c["id"]), before, after, order, limit)


@each_prefix("GET", "/{folder_id}/files")
async def list_files_for_folder(
    folder_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
    include_content: bool = False,
) -> list[dict[str, Any]]:
    await folder_row(gw, checked_id(folder_id, "source"))
    columns = FILE_COLUMNS + (", content" if include_content else "")
    listing = Listing("folder_files", columns=columns)
    listing.filter("folder_id = {}", folder_id)
    rows = await listing.page(gw.pool, "file", before, after, order, limit)
    return [render_file(dict(r), content=r["content"] if include_content else None) for r in rows]


@each_prefix("GET", "/{folder_id}/files/{file_id}")
async def retrieve_file(
    folder_id: str, file_id: str, gw: GW, include_content: bool = False
) -> dict[str, Any]:
    checked_id(folder_id, "source")
    row = await file_row(gw, checked_id(file_id, "file"), content=include_content)
    if row["folder_id"] != folder_id:
        raise HTTPException(404, f"File with id={file_id} not found in folder {folder_id}")
    return render_file(row, content=row.get("content"))


@each_prefix("DELETE", "/{folder_id}/{file_id}", status_code=204)
async def delete_file_from_folder(folder_id: str, file_id: str, gw: GW) -> Response:
    """The file and its chunks; agents no longer see it."""
    checked_id(folder_id, "source")
    checked_id(file_id, "file")

    async def decide(conn: asyncpg.Connection) -> Event | None:
        found = await conn.fetchval("SELECT folder_id FROM folder_files WHERE id = $1", file_id)
        if found != folder_id:
            raise HTTPException(404, f"File with id={file_id} not found in folder {folder_id}")
        return FileDeleted(folder_id=folder_id, file_id=file_id)

    await on_folder(gw, folder_id, decide)
    return Response(status_code=204)
