"""Folders and their files (Letta's folders, formerly sources).

On `o.evt.folder.<folder_id>` the gateway appends what clients decide: the folder's
creation, changes and deletion, and its files' uploads and deletions (a folder's
subject orders its file names, so duplicate names are decided on its state).

On `o.evt.folder.<folder_id>.file.<file_id>` the memory service appends each step of
processing one file, so a worker killed halfway resumes at the next step and never
repeats a recorded one: started, parsed (where the chunks end), chunks embedded (in
batches), processed or failed.

**Where the bytes are.** An upload's bytes and its parsed text are put, before the
event that names them, in the JetStream object store `O_FILES` under the SHA-256 of
their content (o_runtime/file_store.py), as images are: a file may be many MiB, more
than one NATS message holds (1 MiB), and the store keeps them with the same durability
as the log (file storage, the stream's replicas, no age limit) and chunks them itself.
Postgres holds only read models, which must be rebuildable from the log, so it cannot
be where the only copy lives.

**What the log holds of a file's text.** Each chunk's text travels with its embedding
in FileChunksEmbedded (as a passage's does: events/archival.py says why the vector is
in the event). Chunks are consecutive spans of the parsed text, so the projection
rebuilds the whole text (what agents open and grep) by joining them; nothing is parsed
or embedded again on a rebuild.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from o_contracts.base import Event
from o_contracts.models import Value


class FolderCreated(Event):
    folder_id: str
    name: str
    description: str | None = None
    instructions: str | None = None
    metadata: dict[str, Any] | None = None
    # Letta's EmbeddingConfig: its handle picks the embedder, its embedding_chunk_size
    # (tokens) the chunks' length.
    embedding_config: dict[str, Any]


class FolderUpdated(Event):
    """Only the fields present in `changes` changed (name, description, instructions,
    metadata)."""

    folder_id: str
    changes: dict[str, Any]


class FolderDeleted(Event):
    """The folder, its files and their chunks are gone; agents no longer see it."""

    folder_id: str


class FileUploaded(Event):
    folder_id: str
    file_id: str
    # Unique in the folder: "<folder name>/<name>", with a suffix for a duplicate
    # (Letta's naming); the name agents open it by.
    file_name: str
    original_file_name: str
    file_type: str  # MIME type (o_contracts.file_types)
    file_size: int
    # The bytes, in the O_FILES object store.
    sha256: str
    # duplicate_handling=replace: the file of the same name this one takes the place of.
    replaces_file_id: str | None = None
    # The bytes are the file's text already, as an agent file carries it (Letta's
    # FileSchema.content, parsed where the file was exported): read as UTF-8 text
    # whatever `file_type` says (a PDF's text is not a PDF), then chunked and embedded
    # like any upload's.
    parsed_text: bool = False


class FileDeleted(Event):
    folder_id: str
    file_id: str


class FileProcessingStarted(Event):
    """The memory service took the file up (status "parsing")."""

    folder_id: str
    file_id: str


class FileParsed(Event):
    """The file's text, and the chunks it will be embedded in (status "embedding")."""

    folder_id: str
    file_id: str
    # The parsed text, in the O_FILES object store: a worker resuming the embedding
    # reads it there instead of parsing again (a parser upgraded meanwhile could give
    # other text, and chunks of two texts would not join up).
    text_sha256: str
    chars: int
    # PDFs only: how many pages the text came from.
    pages: int | None = None
    # Where each chunk ends, as offsets into the text; chunk i spans
    # [chunk_ends[i-1], chunk_ends[i]) and chunk 0 starts at 0.
    chunk_ends: list[int]
    embedding_model: str


class FileChunk(Value):
    index: int = Field(ge=0)
    # The span of the text as it is (whitespace included: the spans join into the text).
    text: str
    # float32 little-endian, base64 (o_contracts.vectors).
    embedding: str


class FileChunksEmbedded(Event):
    """A batch of consecutive chunks with their embeddings; chunk ids derive from the file
    id and the index, so a batch recorded twice would still be one row per chunk."""

    folder_id: str
    file_id: str
    embedding_model: str
    chunks: list[FileChunk]


class FileProcessed(Event):
    """Every chunk is embedded (status "completed"); agents can open the file."""

    folder_id: str
    file_id: str


class FileFailed(Event):
    """Processing stopped for good (status "error"), with the reason clients see."""

    folder_id: str
    file_id: str
    error: str
