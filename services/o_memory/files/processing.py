"""The file worker: ProcessFile, one recorded step at a time.

Each step reads how far the file got (the folders projection, checked at the file's
subject), does the next piece of work and appends its event with the file subject's
expected sequence: pending -> FileProcessingStarted -> FileParsed -> FileChunksEmbedded
(one batch at a time) -> FileProcessed. A worker killed at any point leaves the steps it
recorded; the command is delivered again (after O_FILES_ACK_WAIT) and the next worker
starts at the first step not recorded. Two workers on one file (a redelivery to a live
but stalled one) meet on the expected sequence: one append wins, the other reads again.
So the file ends `completed` and no chunk is recorded twice. Event ids derive from the
file and the step, and chunk ids from the file and the chunk's index.

A file that cannot be read (a broken PDF, no text, bytes missing) fails at once; an
embedder that keeps failing is tried again with backoff and, at the last delivery,
recorded as FileFailed with its reason, so no file stays half-done.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import asyncpg

from o_contracts import subjects
from o_contracts.base import Event, Reply
from o_contracts.envelope import Envelope
from o_contracts.events import (
    FileChunksEmbedded,
    FileFailed,
    FileParsed,
    FileProcessed,
    FileProcessingStarted,
)
from o_contracts.events.folders import FileChunk
from o_contracts.file_commands import FileOpenRequest, OpenFiles, ProcessFile
from o_contracts.ids import derived_id
from o_contracts.projection_names import FOLDERS
from o_contracts.vectors import pack_vector
from o_memory.embeddings import embedder_for
from o_memory.files.chunking import chunk_ends, spans, target_chars
from o_memory.files.handlers import FileViews
from o_memory.files.parsing import ParseError, parse
from o_memory.files.settings import FileSettings
from o_runtime.commands import Delivery
from o_runtime.eventlog import AppendRejected, ConcurrencyConflict
from o_runtime.file_store import FileMissing, file_store
from o_runtime.outages import is_outage
from o_runtime.service import Service

log = logging.getLogger(__name__)
PRODUCER = "memory"
# More chunks than this would not fit FileParsed's chunk_ends in one event.
MAX_CHUNKS = 50_000
# A batch of chunks stays well inside one NATS message (1 MiB).
MAX_BATCH_BYTES = 512 * 1024
# How a file that arrived as its text is read (FileUploaded.parsed_text).
TEXT = "text/plain"


class Failed(Exception):
    """The file cannot be processed; recorded as FileFailed with this reason."""


@dataclass(frozen=True)
class FileState:
    file_id: str
    folder_id: str
    status: str
    file_type: str
    sha256: str
    file_seq: int
    embedding_config: dict[str, Any]
    total_chunks: int | None = None
    chunks_embedded: int | None = None
    text_sha256: str | None = None
    embedding_model: str | None = None
    chunk_ends: tuple[int, ...] = ()
    # The bytes are the file's text already (an agent file's content): read as text.
    parsed_text: bool = False

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> FileState:
        return cls(
            file_id=row["id"],
            folder_id=row["folder_id"],
            status=row["status"],
            file_type=row["file_type"],
            sha256=row["sha256"],
            file_seq=row["file_seq"],
            embedding_config=dict(row["embedding_config"] or {}),
            total_chunks=row["total_chunks"],
            chunks_embedded=row["chunks_embedded"],
            text_sha256=row["text_sha256"],
            embedding_model=row["embedding_model"],
            chunk_ends=tuple(row["chunk_ends"] or ()),
            parsed_text=row["parsed_text"],
        )


_STATE = (
    "SELECT f.id, f.folder_id, f.status, f.file_type, f.sha256, f.file_seq, f.total_chunks,"
    " f.chunks_embedded, f.text_sha256, f.embedding_model, f.chunk_ends, f.parsed_text,"
    " fo.embedding_config"
    " FROM folder_files f JOIN folders fo ON fo.id = f.folder_id WHERE f.id = $1"
)


def batch_indices(state: FileState, text_lengths: list[int], batch: int) -> range:
    """The chunks the next FileChunksEmbedded records: from the first not embedded, up to
    `batch` of them and MAX_BATCH_BYTES of text (at least one)."""
    first = state.chunks_embedded or 0
    last = min(first + batch, state.total_chunks or 0)
    size = 0
    for i in range(first, last):
        size += text_lengths[i] * 4 + 4096  # worst-case UTF-8, and the vector's room
        if size > MAX_BATCH_BYTES and i > first:
            return range(first, i)
    return range(first, last)


class FileWorker:
    def __init__(self, service: Service, views: FileViews, settings: FileSettings) -> None:
        self.s = service
        self.views = views
        self.settings = settings

    async def process_file(self, env: Envelope[ProcessFile], delivery: Delivery) -> Reply:
        texts: dict[str, str] = {}
        try:
            return await self._process(env.data, texts)
        except Exception as exc:
            if is_outage(exc) or not delivery.last_attempt:
                raise
            # The last delivery: say why for good, rather than leave the file half-done.
            log.exception("processing file %s failed for good", env.data.file_id)
            return await self._process(env.data, texts, failure=f"processing failed: {exc}")

    async def _read(self, cmd: ProcessFile) -> FileState | None:
        eventlog = self.s.eventlog
        last = max(
            await eventlog.last_seq(subjects.file_subject(cmd.folder_id, cmd.file_id)),
            await eventlog.last_seq(subjects.folder_subject(cmd.folder_id)),
        )
        async with self.s.reads.at(last, FOLDERS) as conn:
            row = await conn.fetchrow(_STATE, cmd.file_id)
        return FileState.from_row(row) if row is not None else None

    async def _process(
        self, cmd: ProcessFile, texts: dict[str, str], failure: str | None = None
    ) -> Reply:
        while True:
            state = await self._read(cmd)
            if state is None:  # deleted (with its folder, perhaps) meanwhile
                return Reply(ok=True, result={"status": "deleted"})
            if state.status == "completed":
                await self._open_in_agents(state)
                return Reply(ok=True, seq=state.file_seq, result={"status": "completed"})
            if state.status == "error":
                return Reply(ok=True, seq=state.file_seq, result={"status": "error"})
            event: Event
            if failure is not None:
                key, event = "failed", self._failed(state, failure)
            else:
                try:
                    key, event = await self._next(state, texts)
                except Failed as exc:
                    key, event = "failed", self._failed(state, str(exc))
            envelope = Envelope.wrap(
                event,
                aggregate_id=state.file_id,
                producer=PRODUCER,
                id=derived_id("evt", state.file_id, key),
            )
            try:
                appended = await self.s.eventlog.append(
                    subjects.file_subject(state.folder_id, state.file_id),
                    envelope,
                    expected_last_seq=state.file_seq,
                )
            except ConcurrencyConflict:
                continue  # another worker recorded this step: read again
            await self.s.watcher.wait(appended.seq, FOLDERS)

    @staticmethod
    def _failed(state: FileState, reason: str) -> FileFailed:
        return FileFailed(folder_id=state.folder_id, file_id=state.file_id, error=reason)

    async def _next(self, state: FileState, texts: dict[str, str]) -> tuple[str, Event]:
        """The next step's key (its event id derives from it) and event."""
        ids = {"folder_id": state.folder_id, "file_id": state.file_id}
        if state.status == "pending":
            return "started", FileProcessingStarted(**ids)
        if state.status == "parsing":
            return "parsed", await self._parse(state, texts)
        if (state.chunks_embedded or 0) < (state.total_chunks or 0):
            event = await self._embed(state, texts)
            return f"chunks-{event.chunks[0].index}", event
        return "processed", FileProcessed(**ids)

    async def _bytes(self, sha256: str) -> bytes:
        store = await file_store(self.s.eventlog)
        try:
            return await store.get(sha256)
        except FileMissing as exc:
            raise Failed("the file's bytes are missing from the file store") from exc

    async def _parse(self, state: FileState, texts: dict[str, str]) -> FileParsed:
        data = await self._bytes(state.sha256)
        try:
            kind = TEXT if state.parsed_text else state.file_type
            parsed = await asyncio.to_thread(parse, data, kind)
        except ParseError as exc:
            raise Failed(str(exc)) from exc
        if not parsed.text.strip():
            raise Failed("No text could be extracted from the file")
        ends = chunk_ends(
            parsed.text, target_chars(state.embedding_config.get("embedding_chunk_size"))
        )
        if len(ends) > MAX_CHUNKS:
            raise Failed(f"the file's text is too long: {len(ends)} chunks, at most {MAX_CHUNKS}")
        store = await file_store(self.s.eventlog)
        text_sha = await store.put(parsed.text.encode("utf-8"))
        texts[text_sha] = parsed.text
        return FileParsed(
            folder_id=state.folder_id,
            file_id=state.file_id,
            text_sha256=text_sha,
            chars=len(parsed.text),
            pages=parsed.pages,
            chunk_ends=ends,
            embedding_model=(await embedder_for(state.embedding_config)).name,
        )

    async def _embed(self, state: FileState, texts: dict[str, str]) -> FileChunksEmbedded:
        assert state.text_sha256 is not None
        text = texts.get(state.text_sha256)
        if text is None:
            text = texts[state.text_sha256] = (await self._bytes(state.text_sha256)).decode("utf-8")
        pieces = spans(text, list(state.chunk_ends))
        indices = batch_indices(state, [len(p) for p in pieces], self.settings.embed_batch)
        embedder = await embedder_for(state.embedding_config)
        if embedder.name != state.embedding_model:
            raise Failed(
                f"the embedding model changed from {state.embedding_model} to {embedder.name}"
                " while the file was processed"
            )
        vectors = await embedder.embed([pieces[i].strip() for i in indices])
        return FileChunksEmbedded(
            folder_id=state.folder_id,
            file_id=state.file_id,
            embedding_model=embedder.name,
            chunks=[
                FileChunk(index=i, text=pieces[i], embedding=pack_vector(v))
                for i, v in zip(indices, vectors, strict=True)
            ],
        )

    async def _open_in_agents(self, state: FileState) -> None:
        """Open the processed file for the agents its folder was attached to before it
        was processed (as Letta puts a new file in their context windows); an agent that
        attached the folder later had it opened by the attachment, and may have closed
        it since, so a late redelivery leaves it alone. Each open's id derives from the
        file and the agent: done once, whoever asks again."""
        agents = await self.s.pool.fetch(
            "SELECT agent_id FROM agent_folders WHERE folder_id = $1 AND attached_seq < $2"
            " ORDER BY attached_seq",
            state.folder_id,
            state.file_seq,
        )
        for row in agents:
            agent_id = row["agent_id"]
            cause = Envelope.wrap(
                OpenFiles(
                    agent_id=agent_id, files=[FileOpenRequest(file_id=state.file_id)], strict=False
                ),
                aggregate_id=agent_id,
                producer=PRODUCER,
                id=derived_id("cmd", state.file_id, "processed", agent_id),
            )
            try:
                await self.views.open(cause, cause.data, min_seq=state.file_seq)
            except AppendRejected as exc:  # the agent went meanwhile
                log.info("file %s not opened for %s: %s", state.file_id, agent_id, exc.reason)
