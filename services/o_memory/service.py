"""The memory service process: block projection, memory commands, core-memory reads,
every agent's evolution decisions kept in its archival memory (evolution_archive.py), and
folders' files: processing uploads, agents' open files, the file tools' searches
(files/)."""

from __future__ import annotations

import asyncio

import msgpack

from o_contracts import subjects
from o_contracts.commands import (
    AttachArchive,
    CreateArchive,
    CreateBlock,
    DeleteArchive,
    DeleteArchivePassage,
    DeleteBlock,
    DeletePassage,
    DetachArchive,
    EditBlockText,
    InsertArchivePassages,
    InsertPassage,
    ReflectOnMemories,
    RestoreBlockVersion,
    RunMemoryTool,
    UpdateArchive,
    UpdateBlock,
)
from o_contracts.events import FileUploaded
from o_contracts.file_commands import CloseFiles, OpenFiles, ProcessFile
from o_contracts.file_requests import FileSearchAnswer, SearchFiles
from o_contracts.projection_names import MEMORY
from o_contracts.requests import ArchivalResults, SearchArchival, first_error
from o_memory.archival_handlers import ArchivalCommands
from o_memory.archival_projection import archival
from o_memory.archive_handlers import ArchiveCommands
from o_memory.command_limits import MAX_PENDING_COMMANDS, MEMORY_HANDLERS
from o_memory.core_memory import read_core_memory
from o_memory.embeddings import local_embedder
from o_memory.evolution_archive import EvolutionArchive, archived_types
from o_memory.files import search
from o_memory.files.handlers import FileViews
from o_memory.files.processing import FileWorker
from o_memory.files.projection import folders
from o_memory.files.settings import FileSettings
from o_memory.files.uploads import Uploads
from o_memory.handlers import MemoryCommands
from o_memory.projections import memory
from o_runtime import llm_providers, provider_registry
from o_runtime.commands import CommandConsumer
from o_runtime.env import Env
from o_runtime.eventlog import AppendRejected
from o_runtime.liveness import liveness
from o_runtime.reactor import EventReactor
from o_runtime.sdk_imports import import_sdks
from o_runtime.service import Service
from o_runtime.watched_answers import WatchedAnswers

# Whether any agent or folder embeds with OpenAI (as the projections stand at start).
# Whether an agent or a folder embeds with a provider (not the local model): any handle
# but local's (an unknown provider's falls back to the local model, and costs the import
# of the SDK once, needlessly).
PROVIDER_EMBEDDING_IN_USE = (
    "SELECT EXISTS (SELECT 1 FROM agents WHERE embedding_config->>'handle' NOT LIKE 'local/%')"
    " OR EXISTS (SELECT 1 FROM folders WHERE embedding_config->>'handle' NOT LIKE 'local/%')"
)


# Searches one process answers at once.
SEARCH_WORKERS = 8


class MemoryService(Service):
    name = "memory"
    searches: list[WatchedAnswers]

    def configure(self, env: Env) -> None:
        self.file_settings = FileSettings.from_env(env)

    def readiness_checks(self) -> dict[str, str | None]:
        # (setup() loads the model before health answers; this says so if that changes.)
        loading = local_embedder().loading or not local_embedder().loaded
        return {"embedder": "the local embedding model is loading" if loading else None}

    def preload(self) -> None:
        local_embedder().load()

    async def setup(self) -> None:
        # The local embedder loads before anything is consumed, and so before /readyz answers
        # (run_forever serves health only once start() returns): the first archival insert
        # waits for no model (docs/memory.md#embeddings). A spare has loaded it already.
        await asyncio.to_thread(self.preload)
        # Registered providers' embedding models (read when an embedder names one).
        provider_registry.bind(self.pool)
        # The openai SDK (~20 MB with its client) only for providers' embeddings (the model's
        # judgements are the executor's: model_calls.py), and now if an agent has them: its
        # next insert would otherwise wait ~0.5 s for the import (o_runtime/sdk_imports.py).
        # The first agent to choose them later waits that once.
        speaks_openai = any(p.protocol == "openai" for p in llm_providers.configured().values())
        if speaks_openai and await self.pool.fetchval(PROVIDER_EMBEDDING_IN_USE):
            await asyncio.to_thread(import_sdks, ["openai"])
        self.project(memory)
        self.project(archival)
        self.project(folders)
        cmds = MemoryCommands(self)
        archives = ArchiveCommands(self)
        self.archival = ArchivalCommands(self, archives)
        views = FileViews(self)
        self.consume(
            CommandConsumer(
                self.eventlog,
                "memory",
                subjects.MEMORY_COMMANDS,
                {
                    CreateBlock: cmds.create_block,
                    UpdateBlock: cmds.update_block,
                    DeleteBlock: cmds.delete_block,
                    RunMemoryTool: cmds.run_memory_tool,
                    RestoreBlockVersion: cmds.restore_version,
                    EditBlockText: cmds.edit_block_text,
                    InsertPassage: self.archival.insert_passage,
                    DeletePassage: self.archival.delete_passage,
                    ReflectOnMemories: self.archival.reflect,
                    CreateArchive: archives.create,
                    UpdateArchive: archives.update,
                    DeleteArchive: archives.delete,
                    AttachArchive: archives.attach,
                    DetachArchive: archives.detach,
                    InsertArchivePassages: archives.insert_passages,
                    DeleteArchivePassage: archives.delete_passage,
                    OpenFiles: views.open_files,
                    CloseFiles: views.close_files,
                },
                concurrency=MEMORY_HANDLERS,
                max_ack_pending=MAX_PENDING_COMMANDS,
            )
        )
        # Files are parsed and embedded on a work queue of their own (a long file never
        # holds up a memory edit); FileUploaded events send its commands.
        worker = FileWorker(self, views, self.file_settings)
        self.consume(
            CommandConsumer(
                self.eventlog,
                "memory-files",
                subjects.FILES_COMMANDS,
                {ProcessFile: worker.process_file},
                ack_wait=self.file_settings.ack_wait,
                concurrency=self.file_settings.concurrency,
            )
        )
        self.reactors.append(
            EventReactor(
                self.eventlog,
                "memory-file-uploads",
                subjects.FILE_UPLOADS,
                {FileUploaded: Uploads(self.eventlog).on_uploaded},
            )
        )
        decisions = EvolutionArchive(self, self.archival)
        self.reactors.append(
            EventReactor(
                self.eventlog,
                "memory-evolution-archive",
                subjects.EVOLUTION_EVENTS,
                {decision: decisions.on_decisions for decision in archived_types()},
            )
        )
        self.broker.subscriber(
            subjects.MEMORY_READ_CORE, queue="memory", title="core memory of an agent"
        )(self.read_core_memory)
        # Searches (an agent's tools, the API's archival search) may wait on an embedding
        # model: watched by their askers, who ask another replica if this one dies
        # (o_runtime/watched_answers.py), and several at once.
        alive = await liveness(self.eventlog)
        self.searches = [
            WatchedAnswers(
                self.eventlog.nc, subject, "memory", alive.incarnation, answer, SEARCH_WORKERS
            )
            for subject, answer in (
                (subjects.MEMORY_SEARCH_ARCHIVAL, self.search_archival),
                (subjects.MEMORY_SEARCH_FILES, self.search_files),
            )
        ]

    async def started(self) -> None:
        for searches in self.searches:
            await searches.start()

    async def stopping(self) -> None:
        for searches in self.searches:
            await searches.stop()

    async def read_core_memory(self, body: bytes) -> bytes:
        """Request: msgpack {agent_id, min_seq}.

        Reply: msgpack {blocks: the agent's blocks, archival_count, archival_tags}
        (what the prompt's memory metadata shows).
        """
        request = msgpack.unpackb(body, raw=False)
        if request.get("min_seq"):
            await self.watcher.wait(int(request["min_seq"]), MEMORY)
        core = await read_core_memory(self.pool, str(request["agent_id"]))
        packed: bytes = msgpack.packb(core, use_bin_type=True)
        return packed

    async def search_archival(self, body: bytes) -> bytes:
        """Request: msgpack SearchArchival; reply: msgpack ArchivalResults (errors included)."""
        try:
            request = SearchArchival.model_validate(msgpack.unpackb(body, raw=False))
        except Exception as exc:  # malformed msgpack or a ValidationError
            return ArchivalResults(ok=False, status=422, error=first_error(exc)).encode()
        try:
            results = await self.archival.search(request)
        except AppendRejected as exc:
            return ArchivalResults(ok=False, status=exc.status, error=exc.reason).encode()
        return ArchivalResults(ok=True, results=results).encode()

    async def search_files(self, body: bytes) -> bytes:
        """Request: msgpack SearchFiles; reply: msgpack FileSearchAnswer (errors included)."""
        try:
            request = SearchFiles.model_validate(msgpack.unpackb(body, raw=False))
        except Exception as exc:  # malformed msgpack or a ValidationError
            return FileSearchAnswer(ok=False, text=first_error(exc)).encode()
        try:
            if request.tool == "grep_files":
                async with self.pool.acquire() as conn:
                    text = await search.grep(conn, request.agent_id, request.arguments)
            else:
                text = await search.semantic(self.pool, request.agent_id, request.arguments)
        except search.FileToolError as exc:
            return FileSearchAnswer(ok=False, text=str(exc)).encode()
        return FileSearchAnswer(ok=True, text=text).encode()
