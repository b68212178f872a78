"""The memory service process: block projection, memory commands, core-memory reads, and
every agent's evolution decisions kept in its archival memory (evolution_archive.py)."""

from __future__ import annotations

import asyncio

import msgpack

from o_contracts import subjects
from o_contracts.commands import (
    CreateBlock,
    DeleteBlock,
    DeletePassage,
    InsertPassage,
    ReflectOnMemories,
    RestoreBlockVersion,
    RunMemoryTool,
    UpdateBlock,
)
from o_contracts.projection_names import MEMORY
from o_contracts.requests import ArchivalResults, SearchArchival, first_error
from o_memory.archival_handlers import ArchivalCommands
from o_memory.archival_projection import archival
from o_memory.core_memory import read_core_memory
from o_memory.embeddings import local_embedder
from o_memory.evolution_archive import EvolutionArchive, archived_types
from o_memory.handlers import MemoryCommands
from o_memory.projections import memory
from o_runtime.commands import CommandConsumer
from o_runtime.eventlog import AppendRejected
from o_runtime.reactor import EventReactor
from o_runtime.service import Service


class MemoryService(Service):
    name = "memory"

    async def setup(self) -> None:
        # The local embedder loads before anything is consumed, and so before /readyz answers
        # (run_forever serves health only once start() returns): the first archival insert
        # waits for no model (docs/memory.md#embeddings).
        await asyncio.to_thread(local_embedder().load)
        self.project(memory)
        self.project(archival)
        cmds = MemoryCommands(self)
        self.archival = ArchivalCommands(self)
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
                    InsertPassage: self.archival.insert_passage,
                    DeletePassage: self.archival.delete_passage,
                    ReflectOnMemories: self.archival.reflect,
                },
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
        self.broker.subscriber(
            subjects.MEMORY_SEARCH_ARCHIVAL, queue="memory", title="archival memory search"
        )(self.search_archival)

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
