"""An agent file's folders and files, decided into what an import writes.

Letta's import (AgentSerializationManager.import_file) creates each folder of the file
(named with an `_<8 hex>` suffix when a folder of that name exists), each file with its
text, processes the files in the background (chunks and embeddings, from the text: it
does not parse again) and attaches the folders to the agents. O does the same with its
own events, exactly as an upload does, so the file is processed by the memory
service's durable worker:

- FolderCreated on the new folder's subject, then one FileUploaded per file whose text
  the file carries (`parsed_text`: read as text whatever its type, since a PDF's text is
  not a PDF); the text goes to the file store first, as an upload's bytes do;
- a file without text (still being processed where it was exported) is left out, and
  the import says so;
- the agent's FolderAttached events, after its history: attaching opens the processed
  files, and a file processed later opens for the agents its folder was attached to.

Ids and the suffix derive from the import's id, so a retried import writes each once.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

from fastapi import HTTPException
from pydantic import ValidationError

from o_contracts.events import FileUploaded, FolderCreated
from o_contracts.file_types import file_type
from o_contracts.ids import derived_id
from o_gateway.agent_files.schema import AgentFile, FileDocument, FileSource
from o_gateway.folder_reads import short_name
from o_gateway.routes.folders import CreateFolderBody, clean_name, embedding_config
from o_runtime.content_store import digest

# A file whose type O does not know is still text (it arrives as its text).
TEXT = "text/plain"
# A folder's name, at most (CreateFolderBody's).
MAX_NAME = 256


@dataclass(frozen=True)
class NewFile:
    event: FileUploaded
    # Its text as UTF-8, put in the file store before the event that names it.
    data: bytes


@dataclass
class NewFolder:
    event: FolderCreated
    files: list[NewFile] = field(default_factory=list)


@dataclass
class FoldersPlan:
    # By the file's id for it (`source-0`).
    folders: dict[str, NewFolder] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)


def folder_id_of(import_id: str, file_ref: str) -> str:
    return derived_id("source", import_id, file_ref)


def plan_folders(
    file: AgentFile, import_id: str, taken: set[str], embedding: str | None
) -> FoldersPlan:
    """`taken`: names of folders O has (not this import's own); `embedding`: the import's
    embedding handle, which replaces the folders' as it replaces the agents' (Letta)."""
    plan = FoldersPlan()
    names = [s.name for s in file.sources]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise HTTPException(422, f"the agent file has two folders named '{repeated[0]}'")
    for source in file.sources:
        plan.folders[source.id] = NewFolder(_folder(source, import_id, taken, embedding))
    for document in file.files:
        folder = plan.folders[document.source_id]
        if document.content is None:
            plan.left_out.append(
                f"file '{document.file_name or document.id}' ({document.id}): the agent file"
                f" holds no text for it (it was {document.processing_status or 'not processed'}"
                " where it was exported)"
            )
            continue
        folder.files.append(_file(document, folder, import_id))
    return plan


def _folder(
    source: FileSource, import_id: str, taken: set[str], embedding: str | None
) -> FolderCreated:
    name = source.name
    if name in taken:
        suffix = hashlib.sha256(f"{import_id}/{source.id}".encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - len(suffix) - 1]}_{suffix}"
    given = (
        {"embedding": embedding}
        if embedding
        else {
            "embedding": source.embedding,
            "embedding_chunk_size": source.embedding_chunk_size,
            "embedding_config": source.embedding_config,
        }
    )
    try:
        config = embedding_config(CreateFolderBody.model_validate({"name": name, **given}))
    except ValidationError as exc:
        raise HTTPException(422, f"folder {source.id}: {exc.errors()[0]['msg']}") from exc
    except HTTPException as exc:
        raise HTTPException(exc.status_code, f"folder {source.id}: {exc.detail}") from exc
    return FolderCreated(
        folder_id=folder_id_of(import_id, source.id),
        name=name,
        description=source.description,
        instructions=source.instructions,
        metadata=source.metadata,
        embedding_config=config,
    )


def _file(document: FileDocument, folder: NewFolder, import_id: str) -> NewFile:
    assert document.content is not None
    original = (
        clean_name(document.original_file_name or short_name(document.file_name or ""))
        or f"{document.id}.txt"
    )
    kind = file_type(original, document.file_type)
    data = document.content.encode("utf-8")
    event = FileUploaded(
        folder_id=folder.event.folder_id,
        file_id=derived_id("file", import_id, document.id),
        file_name=_unique_name(folder, original),
        original_file_name=original,
        file_type=kind.mime_type if kind is not None else TEXT,
        file_size=document.file_size if document.file_size is not None else len(data),
        sha256=digest(data),
        parsed_text=True,
    )
    return NewFile(event, data)


def _unique_name(folder: NewFolder, original: str) -> str:
    """An upload's naming (routes/folders.py): "<folder>/<name>", "<folder>/<stem>_(n)<ext>"
    for the n-th file of the same name."""
    count = sum(f.event.original_file_name == original for f in folder.files)
    stem, ext = os.path.splitext(original)
    prefix = folder.event.name
    return f"{prefix}/{original}" if not count else f"{prefix}/{stem}_({count}){ext}"
