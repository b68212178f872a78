"""Archival memory commands and the search request: the memory service decides and appends.

A passage's embedding and importance are computed before its event is
appended and travel inside it; see o_contracts.events.archival for why.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime
from statistics import mean
from typing import Any

from o_contracts import subjects
from o_contracts.base import Reply
from o_contracts.commands import DeletePassage, InsertPassage, ReflectOnMemories
from o_contracts.envelope import Envelope, decode
from o_contracts.events import MemoriesReflected, PassageDeleted, PassageInserted, PassagesAccessed
from o_contracts.events.archival import ArchivalPassage, ImportanceSource
from o_contracts.ids import derived_id
from o_contracts.projection_names import ARCHIVAL
from o_contracts.requests import SearchArchival
from o_contracts.vectors import pack_vector
from o_memory import archival, judgement
from o_memory.archive_handlers import ArchiveCommands, recorded
from o_memory.embeddings import EmbeddingError, embedder_for
from o_memory.model_calls import ExecutorModel
from o_memory.stream import InvalidStreamSettings, StreamSettings
from o_runtime.commands import Delivery
from o_runtime.eventlog import AppendRejected
from o_runtime.handler_share import HandlerShare
from o_runtime.service import Service

log = logging.getLogger(__name__)
PRODUCER = "memory"
# How many of the unreflected memories the model is shown (the most recent).
REFLECTION_WINDOW = 100


def passage_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "agent_id": row["agent_id"],
        "text": row["text"],
        "tags": list(row["tags"]),
        "importance": row["importance"],
        "importance_source": row["importance_source"],
        "kind": row["kind"],
        "sources": list(row["sources"]),
        "embedding_model": row["embedding_model"],
        "created_at": row["created_at"].isoformat(),
        "last_accessed_at": row["last_accessed_at"].isoformat(),
        "archive_id": row.get("archive_id"),
        "metadata": row.get("metadata") or {},
    }


class ArchivalCommands:
    def __init__(self, service: Service, archives: ArchiveCommands) -> None:
        self.s = service
        self.archives = archives
        self.model = ExecutorModel(service.eventlog.nc)
        # The memory consumer's handlers that may wait on a model or an embedder at once.
        self.slow = archives.slow

    async def _agent(self, agent_id: str) -> tuple[dict[str, Any], StreamSettings]:
        # The agent registry is the gateway's projection; memory only reads it.
        row = await self.s.pool.fetchrow(
            "SELECT llm_config, embedding_config, metadata, enable_sleeptime FROM agents"
            " WHERE id = $1",
            agent_id,
        )
        if row is None:
            raise AppendRejected(f"Agent {agent_id} not found", 404)
        try:
            settings = StreamSettings.from_metadata(row["metadata"])
        except InvalidStreamSettings as exc:
            raise AppendRejected(f"agent {agent_id}: {exc}", 400) from exc
        return dict(row), settings

    async def _vectors(
        self, agent: dict[str, Any], texts: list[str]
    ) -> tuple[str, list[list[float]]]:
        embedder = await embedder_for(agent["embedding_config"])
        try:
            return embedder.name, await embedder.embed(texts)
        except EmbeddingError as exc:
            raise AppendRejected(str(exc), 502) from exc

    async def _embed(self, agent: dict[str, Any], texts: list[str]) -> tuple[str, list[str]]:
        model, vectors = await self._vectors(agent, texts)
        return model, [pack_vector(v) for v in vectors]

    async def _done(self, agent_id: str, command_id: str) -> int | None:
        """The sequence of the event `command_id` made on the agent's archival subject."""
        return await recorded(self.s, subjects.archival_subject(agent_id), command_id)

    async def _inserted(self, passage_id: str, seq: int) -> Reply:
        row = await self.s.pool.fetchrow(
            f"SELECT {archival.PASSAGE_COLUMNS} FROM passages WHERE id = $1", passage_id
        )
        if row is None:  # deleted in between
            raise AppendRejected(f"passage {passage_id} was deleted meanwhile", 409)
        return Reply(ok=True, seq=seq, result={"passage": passage_json(dict(row))})

    async def insert_passage(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        return await self.insert(env, env.data, share=self.slow)

    async def insert(
        self,
        cause: Envelope[Any],
        cmd: InsertPassage,
        own: bool = False,
        share: HandlerShare | None = None,
    ) -> Reply:
        """Insert `cmd`'s passage once for `cause`: the InsertPassage command itself, or
        an event the memory service keeps in archival memory (evolution_archive.py:
        `own`, the agent's own memory even with an archive attached, as what it records
        of the agent's own evolution is no other agent's).

        The appended event's id derives from `cause`'s id and records it as its cause
        (archival_effects), so `cause` delivered again is answered from the record.
        A new passage is rated and embedded within `share` (a command handler's), if given.
        """
        text = cmd.text.strip()
        if not text:
            raise AppendRejected("text must not be empty", 400)
        if any(not t.strip() for t in cmd.tags):
            raise AppendRejected("tags must be non-empty strings", 400)
        done = await self._done(cmd.agent_id, cause.id)
        # (An agent with an archive attached writes there: events/archives.py.)
        archive_id = None if own else await self.s.pool.fetchval(archival.WRITES_TO, cmd.agent_id)
        if done is None and archive_id is not None:
            done = await self.archives.done(archive_id, cause.id)
        if done is None:
            # Written into an archive detached since: the detach was decided on a
            # projection past that write, so its record is there to read as it is.
            done = await archival.effect_of(self.s.pool, cause.id)
        if done is not None:
            return await self._inserted(cmd.passage_id, done)
        # (Its rating asks the agent's model, and its embedding may ask a provider.)
        with share.taken() if share is not None else contextlib.nullcontext():
            return await self._insert_new(cause, cmd, text, archive_id)

    async def _insert_new(
        self, cause: Envelope[Any], cmd: InsertPassage, text: str, archive_id: str | None
    ) -> Reply:
        agent, settings = await self._agent(cmd.agent_id)
        source: ImportanceSource
        if cmd.importance is not None:
            importance, source = cmd.importance, "caller"
        else:
            importance, source = await judgement.rate_importance(
                self.model.ask, agent["llm_config"], text
            )
        model, (vector,) = await self._embed(agent, [text])
        passage = ArchivalPassage(
            passage_id=cmd.passage_id,
            text=text,
            tags=list(dict.fromkeys(cmd.tags)),
            # The cause's time, not the clock: a retried command yields the same event.
            created_at=cmd.created_at or cause.time,
            importance=importance,
            importance_source=source,
            embedding_model=model,
            embedding=vector,
        )
        seq: int | None = None
        if archive_id is not None:
            try:
                seq = (
                    await self.archives.insert_written(cause, archive_id, cmd.agent_id, passage)
                ).seq
            except AppendRejected as exc:
                if exc.status != 404:
                    raise
                # Deleted since it was looked up: the memory stays the agent's own.
        if seq is None:
            event = cause.caused(
                PassageInserted(agent_id=cmd.agent_id, passage=passage),
                aggregate_id=cmd.agent_id,
                producer=PRODUCER,
                id=derived_id("evt", cause.id),
            )
            appended = await self.s.eventlog.append(subjects.archival_subject(cmd.agent_id), event)
            await self.s.watcher.wait(appended.seq, ARCHIVAL)
            seq = appended.seq
        if not agent["enable_sleeptime"]:
            # A sleep-time agent reflects on its companion's schedule instead
            # (o_evolution/turns.py), as the companion's run.
            await self._maybe_reflect(cause, cmd.agent_id, settings)
        return await self._inserted(cmd.passage_id, seq or 0)

    async def _maybe_reflect(
        self, env: Envelope[Any], agent_id: str, settings: StreamSettings
    ) -> None:
        total, memories = await archival.unreflected(self.s.pool, agent_id)
        if total < settings.reflection_threshold or not memories:
            return
        # One reflection per batch of memories: the id names the batch's first
        # memory, so the inserts that follow deduplicate onto the same command.
        command = env.caused(
            ReflectOnMemories(agent_id=agent_id),
            aggregate_id=agent_id,
            producer=PRODUCER,
            id=derived_id("cmd", agent_id, "reflect", str(memories[0]["seq"])),
        )
        await self.s.eventlog.send_command(subjects.memory_command_subject(agent_id), command)

    async def reflect(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: ReflectOnMemories = env.data
        done = await self._done(cmd.agent_id, env.id)
        if done is not None:
            msg = await self.s.eventlog.js.get_msg(subjects.EVENTS_STREAM, done, direct=True)
            recorded = decode(msg.data or b"").data
            assert isinstance(recorded, MemoriesReflected)
            return Reply(ok=True, seq=done, result={"insights": len(recorded.insights)})
        with self.slow.taken():  # (it asks the agent's model)
            return await self._reflect(env, cmd)

    async def _reflect(self, env: Envelope[Any], cmd: ReflectOnMemories) -> Reply:
        agent, settings = await self._agent(cmd.agent_id)
        total, memories = await archival.unreflected(self.s.pool, cmd.agent_id)
        if total < settings.reflection_threshold:
            return Reply(ok=True, result={"insights": 0})
        shown = memories[-REFLECTION_WINDOW:]
        insights, usage = await judgement.reflect(
            self.model.ask, agent["llm_config"], [m["text"] for m in shown]
        )
        passages: list[ArchivalPassage] = []
        if insights:
            model, vectors = await self._embed(agent, [i.text for i in insights])
            for n, (insight, vector) in enumerate(zip(insights, vectors, strict=True)):
                cited = [shown[c] for c in insight.cites]
                passages.append(
                    ArchivalPassage(
                        passage_id=derived_id("passage", env.id, str(n)),
                        text=insight.text,
                        tags=["reflection"],
                        created_at=env.time,
                        # As important as what it summarises; saves a rating call each.
                        importance=round(mean(c["importance"] for c in cited)),
                        importance_source="llm",
                        embedding_model=model,
                        embedding=vector,
                        kind="reflection",
                        sources=[c["id"] for c in cited],
                    )
                )
        event = env.caused(
            # Every unreflected memory counts as reflected on, so the counter
            # starts again even if the model found nothing worth keeping.
            MemoriesReflected(
                agent_id=cmd.agent_id, insights=passages, source_ids=[m["id"] for m in memories]
            ),
            aggregate_id=cmd.agent_id,
            producer=PRODUCER,
            id=derived_id("evt", env.id),
        )
        appended = await self.s.eventlog.append(subjects.archival_subject(cmd.agent_id), event)
        await self.s.watcher.wait(appended.seq, ARCHIVAL)
        return Reply(
            ok=True,
            seq=appended.seq,
            result={"insights": len(passages), "usage": usage.model_dump()},
        )

    async def delete_passage(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: DeletePassage = env.data
        last = await self.s.eventlog.last_seq(subjects.archival_subject(cmd.agent_id))
        async with self.s.reads.at(last, ARCHIVAL) as conn:
            done = await archival.effect_of(conn, env.id)
            found = await conn.fetchrow(
                f"SELECT archive_id FROM passages WHERE id = $2 AND {archival.AGENT_SCOPE}",
                cmd.agent_id,
                cmd.passage_id,
            )
        if done is None and found is None:
            # Done already, in an archive (on the archive's subject), if anywhere.
            async with self.s.reads.at(await self.s.eventlog.end(), ARCHIVAL) as conn:
                done = await archival.effect_of(conn, env.id)
        if done is not None:
            return Reply(ok=True, seq=done)
        if found is not None and found["archive_id"] is not None:
            # A passage of an archive attached to the agent: gone for every agent sharing it.
            return await self.archives.delete_passage_of(env, found["archive_id"], cmd.passage_id)
        if found is None:
            raise AppendRejected(
                f"Passage {cmd.passage_id} not found in agent {cmd.agent_id}'s archival memory",
                404,
            )
        event = env.caused(
            PassageDeleted(agent_id=cmd.agent_id, passage_id=cmd.passage_id),
            aggregate_id=cmd.agent_id,
            producer=PRODUCER,
            id=derived_id("evt", env.id),
        )
        appended = await self.s.eventlog.append(subjects.archival_subject(cmd.agent_id), event)
        await self.s.watcher.wait(appended.seq, ARCHIVAL)
        return Reply(ok=True, seq=appended.seq)

    async def search(self, request: SearchArchival) -> list[dict[str, Any]]:
        """Ranked results; the returned passages' access is recorded as one event (an
        agent's search: one of an archive, or of every passage, is no agent's access)."""
        if request.agent_id is None:
            return await self._search_passages(request)
        agent, settings = await self._agent(request.agent_id)
        if request.min_seq:
            await self.s.watcher.wait(request.min_seq, ARCHIVAL)
        if request.ranking == "relevance":
            settings = StreamSettings(w_recency=0, w_importance=0, w_relevance=1)
        model, (vector,) = await self._vectors(agent, [request.query])
        now = datetime.now(UTC)
        hits = await archival.search(
            self.s.pool,
            request.agent_id,
            query=request.query,
            model=model,
            vector=vector,
            filters=_filter(request),
            settings=settings,
            top_k=request.top_k,
            now=now,
        )
        if hits:
            accessed = Envelope.wrap(
                PassagesAccessed(
                    agent_id=request.agent_id,
                    passage_ids=[h.row["id"] for h in hits],
                    accessed_at=now,
                ),
                aggregate_id=request.agent_id,
                producer=PRODUCER,
            )
            await self.s.eventlog.append(subjects.archival_subject(request.agent_id), accessed)
        return [_result(h) for h in hits]

    async def _search_passages(self, request: SearchArchival) -> list[dict[str, Any]]:
        """One archive's passages, or every passage, by relevance alone. Their passages may
        come from several embedding models (agents write into archives with theirs): the
        query is embedded with each model found there that O can embed with, and the best
        of all are kept."""
        key, scope = None, archival.EVERY_PASSAGE
        if request.archive_id is not None:
            if not await self.s.pool.fetchval(
                "SELECT 1 FROM archives WHERE id = $1", request.archive_id
            ):
                raise AppendRejected(f"Archive {request.archive_id} not found", 404)
            key, scope = request.archive_id, archival.ARCHIVE_SCOPE
        if request.min_seq:
            await self.s.watcher.wait(request.min_seq, ARCHIVAL)
        models = await self.s.pool.fetch(
            f"SELECT DISTINCT embedding_model FROM passages WHERE {scope}", key
        )
        # (Passages whose model O cannot embed with any more are found by their words.)
        found = [await embedder_for({"handle": r["embedding_model"]}) for r in models]
        embedders = {e.name: e for e in found or [await embedder_for(None)]}
        best: dict[str, archival.Hit] = {}
        now = datetime.now(UTC)
        for _, embedder in sorted(embedders.items()):
            try:
                (vector,) = await embedder.embed([request.query])
            except EmbeddingError as exc:
                raise AppendRejected(str(exc), 502) from exc
            for hit in await archival.search(
                self.s.pool,
                key,
                query=request.query,
                model=embedder.name,
                vector=vector,
                filters=_filter(request),
                settings=StreamSettings(w_recency=0, w_importance=0, w_relevance=1),
                top_k=request.top_k,
                now=now,
                scope=scope,
            ):
                kept = best.get(hit.row["id"])
                if kept is None or hit.scored.score > kept.scored.score:
                    best[hit.row["id"]] = hit
        ranked = sorted(best.values(), key=lambda h: -h.scored.score)[: request.top_k]
        return [_result(h) for h in ranked]


def _filter(request: SearchArchival) -> archival.SearchFilter:
    return archival.SearchFilter(
        request.tags, request.tag_match_mode, request.start_datetime, request.end_datetime
    )


def _result(hit: archival.Hit) -> dict[str, Any]:
    return passage_json(hit.row) | {
        "score": hit.scored.score,
        "relevance": hit.scored.relevance,
        "cosine": hit.cosine,
    }
