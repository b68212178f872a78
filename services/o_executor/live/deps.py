"""The loop's dependencies in the live system (run/deps.py says what each one is)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgpack

from o_contracts import subjects
from o_contracts.base import Event
from o_contracts.events import RunStarted, RunSteerRequested
from o_contracts.models import ToolCall
from o_contracts.projection_names import MEMORY
from o_executor import images, llm
from o_executor.live.recorder import Recorder
from o_executor.live.tools import LiveTools
from o_executor.run.deps import ModelRequest, Reflection, RunCancelled, ToolOutcome
from o_memory.core_memory import CoreMemory, read_core_memory

if TYPE_CHECKING:
    from o_executor.service import ExecutorService


class LiveDeps:
    def __init__(
        self,
        service: ExecutorService,
        recorder: Recorder,
        tools: LiveTools,
        *,
        cancelled: bool,
        cancel_requested: asyncio.Event,
        core: tuple[int, asyncio.Task[CoreMemory]] | None,
    ) -> None:
        self.s = service
        self.prompts = service.prompts
        self.recorder = recorder
        self.tools = tools
        self._cancelled = cancelled
        # Set when a RunCancellationRequested for this run is published: an LLM
        # call in flight is abandoned at once (the log's record of it is what
        # decides, see Recorder._read_news).
        self._cancel_requested = cancel_requested
        # Core memory read ahead for the first prompt, with the memory position
        # it was read at.
        self._core = core

    # -- recording ------------------------------------------------------------

    def start(self, event: RunStarted) -> None:
        self.recorder.start(event)

    async def started(self) -> bool:
        return await self.recorder.started()

    async def record(self, event: Event, key: str, *, even_if_gone: bool = False) -> int:
        return await self.recorder.record(event, key, even_if_gone=even_if_gone)

    def cancelled(self) -> bool:
        return self._cancelled or self.recorder.cancelled or self._cancel_requested.is_set()

    async def steering(self) -> list[RunSteerRequested]:
        # Heard live (LiveRun), read with the news (Recorder) or from the log on resuming.
        return list(self.recorder.steers.values())

    # -- reading ----------------------------------------------------------------

    async def core_memory(self) -> CoreMemory:
        prefetched, self._core = self._core, None
        if prefetched is not None and prefetched[0] == self.tools.memory_seq:
            return await prefetched[1]
        # Memory changed since (a memory tool ran): read it again.
        if prefetched is not None:
            prefetched[1].cancel()
        return await read_core(
            self.s,
            self.tools.agent.id,
            self.tools.memory_seq,
            self.recorder.cmd.isolated_block_ids,
        )

    def drop_reads_ahead(self) -> None:
        if self._core is not None:  # read ahead but never used (the run ended early)
            self._core[1].cancel()
            self._core = None

    # -- the model ----------------------------------------------------------------

    async def complete(self, request: ModelRequest, *, cancellable: bool = True) -> llm.LLMResult:
        call = llm.complete(
            request.handle,
            await images.as_sent(self.s.eventlog.images, request.messages),
            request.tools,
            stream=request.stream,
            force_tool=request.force_tool,
            settings=request.settings,
            on_text=request.on_text,
            on_tool_call=request.on_tool_call,
            retries=self.s.config.llm,
        )
        if not cancellable:
            return self._traced(request, await call)
        answer = asyncio.create_task(call)
        cancel = asyncio.create_task(self._cancel_requested.wait())
        await asyncio.wait({answer, cancel}, return_when=asyncio.FIRST_COMPLETED)
        cancel.cancel()
        if not answer.done():
            # Cancelled mid-call: the answer is abandoned, never recorded.
            answer.cancel()
            with contextlib.suppress(BaseException):
                await answer
            raise RunCancelled(self.recorder.cmd.run_id)
        return self._traced(request, answer.result())

    def _traced(self, request: ModelRequest, result: llm.LLMResult) -> llm.LLMResult:
        if request.step_id is not None:
            cmd = self.recorder.cmd
            self.s.traces.write(request.step_id, cmd.run_id, cmd.agent_id, request.handle, result)
        return result

    async def publish(self, delta: dict[str, Any]) -> None:
        await self.s.eventlog.nc.publish(
            subjects.run_tokens_subject(self.recorder.cmd.run_id),
            msgpack.packb(delta, use_bin_type=True),
        )

    # -- tools ------------------------------------------------------------------

    async def run_tool(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        return await self.tools.run_tool(call, args)

    async def resolve_in_doubt(self, call: ToolCall, requested_seq: int) -> ToolOutcome | None:
        return await self.tools.resolve_in_doubt(call, requested_seq)

    async def reflect(self, agent_id: str) -> Reflection:
        return await self.tools.reflect(agent_id)


async def read_core(
    service: ExecutorService, agent_id: str, min_seq: int, isolated: Sequence[str] = ()
) -> CoreMemory:
    """The agent's blocks (a conversation's own in place of theirs) and archival summary,
    as of at least log position `min_seq`."""
    if min_seq:
        await service.watcher.wait(min_seq, MEMORY)
    return await read_core_memory(service.pool, agent_id, isolated)
