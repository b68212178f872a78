"""Archives' commands (events/archives.py): the memory service decides and appends.

Each decision is made on the archive's subject at its last position, with the archival
projection caught up to it (optimistic concurrency: `append_decided`), and a command
delivered again is answered from `archival_effects` instead of being decided twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from o_contracts import subjects
from o_contracts.base import Event, Reply
from o_contracts.commands import (
    AttachArchive,
    CreateArchive,
    DeleteArchive,
    DeleteArchivePassage,
    DetachArchive,
    InsertArchivePassages,
    UpdateArchive,
)
from o_contracts.envelope import Envelope
from o_contracts.events import (
    ArchiveAttached,
    ArchiveCreated,
    ArchiveDeleted,
    ArchiveDetached,
    ArchivePassageDeleted,
    ArchivePassagesInserted,
    ArchiveUpdated,
)
from o_contracts.events.archival import ArchivalPassage, ImportanceSource
from o_contracts.ids import derived_id
from o_contracts.projection_names import ARCHIVAL
from o_contracts.vectors import pack_vector
from o_memory import archival
from o_memory.command_limits import SLOW_HANDLERS
from o_memory.embeddings import LOCAL_MODEL, EmbeddingError, embedder_for
from o_memory.judgement import DEFAULT_IMPORTANCE
from o_runtime.commands import Delivery
from o_runtime.eventlog import AppendRejected
from o_runtime.handler_share import HandlerShare
from o_runtime.service import Service

PRODUCER = "memory"
Decide = Callable[[asyncpg.Connection], Awaitable[Event | None]]


def archive_missing(archive_id: str) -> AppendRejected:
    return AppendRejected(f"Archive {archive_id} not found", 404)


async def archive_row(conn: asyncpg.Connection, archive_id: str) -> asyncpg.Record:
    row = await conn.fetchrow("SELECT * FROM archives WHERE id = $1", archive_id)
    if row is None:
        raise archive_missing(archive_id)
    return row


async def recorded(service: Service, subject: str, command_id: str) -> int | None:
    """The sequence of the event `command_id` made, read as of `subject` now (o_runtime/
    reads.py): a command delivered again after its ack was lost is answered from the
    record instead of being done twice."""
    last = await service.eventlog.last_seq(subject)
    async with service.reads.at(last, ARCHIVAL) as conn:
        return await archival.effect_of(conn, command_id)


class ArchiveCommands:
    def __init__(self, service: Service, slow: HandlerShare | None = None) -> None:
        self.s = service
        # The memory consumer's handlers that may wait on a model or an embedder at once
        # (shared with ArchivalCommands).
        self.slow = slow or HandlerShare(SLOW_HANDLERS)

    async def _decided(
        self, env: Envelope[Any], archive_id: str, decide: Decide, subject: str | None = None
    ) -> Reply:
        """Append what `decide` makes of the archive as it is, once for `env`, on the
        archive's subject (or `subject`: an attachment's, read with the archive's)."""
        archive = subjects.archive_subject(archive_id)
        subject = subject or archive
        done: list[int] = []

        async def decision(last: int) -> Envelope[Any] | None:
            at = last if subject == archive else max(last, await self.s.eventlog.last_seq(archive))
            async with self.s.reads.at(at, ARCHIVAL) as conn:
                seq = await archival.effect_of(conn, env.id)
                if seq is not None:
                    done.append(seq)
                    return None
                event = await decide(conn)
            if event is None:
                done.append(last)
                return None
            return env.caused(
                event, aggregate_id=archive_id, producer=PRODUCER, id=derived_id("evt", env.id)
            )

        appended = await self.s.eventlog.append_decided(subject, decision)
        seq = appended.seq if appended is not None else done[-1]
        await self.s.watcher.wait(seq, ARCHIVAL)
        return Reply(ok=True, seq=seq)

    async def create(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: CreateArchive = env.data

        async def decide(conn: asyncpg.Connection) -> Event | None:
            if await conn.fetchval("SELECT 1 FROM archives WHERE id = $1", cmd.archive_id):
                return None
            return ArchiveCreated(
                archive_id=cmd.archive_id,
                name=cmd.name,
                description=cmd.description,
                embedding_model=cmd.embedding or LOCAL_MODEL,
            )

        return await self._decided(env, cmd.archive_id, decide)

    async def update(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: UpdateArchive = env.data

        async def decide(conn: asyncpg.Connection) -> Event | None:
            row = await archive_row(conn, cmd.archive_id)
            changes = {
                k: v
                for k, v in cmd.model_dump(
                    include={"name", "description"}, exclude_unset=True
                ).items()
                if v is not None and v != row[k]
            }
            # (Recorded even when it changes nothing: its record answers it if it is
            # delivered again, after a later rename it would otherwise undo.)
            return ArchiveUpdated(archive_id=cmd.archive_id, changes=changes)

        return await self._decided(env, cmd.archive_id, decide)

    async def delete(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: DeleteArchive = env.data

        async def decide(conn: asyncpg.Connection) -> Event | None:
            await archive_row(conn, cmd.archive_id)
            return ArchiveDeleted(archive_id=cmd.archive_id)

        return await self._decided(env, cmd.archive_id, decide)

    async def attach(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: AttachArchive = env.data

        async def decide(conn: asyncpg.Connection) -> Event | None:
            await archive_row(conn, cmd.archive_id)
            if not await conn.fetchval("SELECT 1 FROM agents WHERE id = $1", cmd.agent_id):
                raise AppendRejected(f"Agent {cmd.agent_id} not found", 404)
            # Attached already, it is recorded all the same: delivered again after a
            # detach, its record answers it (it used to attach the archive again).
            return ArchiveAttached(archive_id=cmd.archive_id, agent_id=cmd.agent_id)

        subject = subjects.archive_agent_subject(cmd.archive_id, cmd.agent_id)
        return await self._decided(env, cmd.archive_id, decide, subject)

    async def detach(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: DetachArchive = env.data

        async def decide(conn: asyncpg.Connection) -> Event | None:
            await archive_row(conn, cmd.archive_id)
            # (As Letta: detaching what is not attached changes nothing. Recorded all the
            # same, so that delivered again after an attach it does not detach.)
            return ArchiveDetached(archive_id=cmd.archive_id, agent_id=cmd.agent_id)

        subject = subjects.archive_agent_subject(cmd.archive_id, cmd.agent_id)
        return await self._decided(env, cmd.archive_id, decide, subject)

    async def insert_passages(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        with self.slow.taken():  # (it embeds them: a provider may be asked)
            return await self._insert_passages(env)

    async def _insert_passages(self, env: Envelope[Any]) -> Reply:
        cmd: InsertArchivePassages = env.data
        texts = [p.text.strip() for p in cmd.passages]
        if not all(texts):
            raise AppendRejected("text must not be empty", 400)
        if any(not t.strip() for p in cmd.passages for t in p.tags):
            raise AppendRejected("tags must be non-empty strings", 400)
        vectors: list[tuple[str, list[str]]] = []

        async def decide(conn: asyncpg.Connection) -> Event | None:
            row = await archive_row(conn, cmd.archive_id)
            if not vectors:  # (embedded once, however many times the append is decided)
                vectors.append(await self._embed(row["embedding_model"], texts))
            model, packed = vectors[0]
            passages = []
            for p, text, vector in zip(cmd.passages, texts, packed, strict=True):
                source: ImportanceSource = "caller" if p.importance is not None else "default"
                passages.append(
                    ArchivalPassage(
                        passage_id=p.passage_id,
                        text=text,
                        tags=list(dict.fromkeys(p.tags)),
                        # The command's time, not the clock: a retry yields the same event.
                        created_at=p.created_at or env.time,
                        importance=p.importance or DEFAULT_IMPORTANCE,
                        importance_source=source,
                        embedding_model=model,
                        embedding=vector,
                        metadata=p.metadata,
                    )
                )
            return ArchivePassagesInserted(archive_id=cmd.archive_id, passages=passages)

        return await self._decided(env, cmd.archive_id, decide)

    async def insert_written(
        self, cause: Envelope[Any], archive_id: str, agent_id: str, passage: ArchivalPassage
    ) -> Reply:
        """A memory the agent wrote, into the archive it writes to (rated and embedded
        already), once for `cause`."""

        async def decide(conn: asyncpg.Connection) -> Event | None:
            await archive_row(conn, archive_id)
            return ArchivePassagesInserted(
                archive_id=archive_id, passages=[passage], agent_id=agent_id
            )

        return await self._decided(cause, archive_id, decide)

    async def done(self, archive_id: str, command_id: str) -> int | None:
        """The sequence of the event `command_id` made on the archive, if the log has one."""
        return await recorded(self.s, subjects.archive_subject(archive_id), command_id)

    async def _embed(self, handle: str, texts: list[str]) -> tuple[str, list[str]]:
        embedder = await embedder_for({"handle": handle})
        try:
            vectors = await embedder.embed(texts)
        except EmbeddingError as exc:
            raise AppendRejected(str(exc), 502) from exc
        return embedder.name, [pack_vector(v) for v in vectors]

    async def delete_passage(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: DeleteArchivePassage = env.data
        return await self.delete_passage_of(env, cmd.archive_id, cmd.passage_id)

    async def delete_passage_of(
        self, env: Envelope[Any], archive_id: str, passage_id: str
    ) -> Reply:
        """Delete an archive's passage once for `env` (DeleteArchivePassage, or an agent's
        DeletePassage of a passage in an archive attached to it)."""

        async def decide(conn: asyncpg.Connection) -> Event | None:
            await archive_row(conn, archive_id)
            archive_of = await conn.fetchval(
                "SELECT archive_id FROM passages WHERE id = $1", passage_id
            )
            if archive_of != archive_id:
                # Letta's words (a passage of another archive, or none).
                raise AppendRejected(
                    f"Passage {passage_id} does not belong to archive {archive_id}",
                    404 if archive_of is None else 400,
                )
            return ArchivePassageDeleted(archive_id=archive_id, passage_id=passage_id)

        return await self._decided(env, archive_id, decide)
