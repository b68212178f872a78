"""Recording a run's facts on its agent's subject: in order, each once, whoever else writes.

Appends carry the subject's last sequence as known here. Someone else may
have written meanwhile: a PATCH of the agent (the run goes on as long as the
agent exists), a cancellation of this run, or another executor that took the
run over (then it is theirs to finish). Ids derive from the run id, so a
repeated append is also deduplicated by the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from o_contracts.base import Event
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope, MalformedMessage, decode
from o_contracts.events import (
    LLMResponded,
    RunCancellationRequested,
    RunCompleted,
    RunQueued,
    RunStarted,
    RunSteered,
    RunSteerRequested,
    ToolCallRequested,
    ToolReturned,
)
from o_contracts.ids import derived_id
from o_contracts.projection_names import AGENTS
from o_executor.live.tools import PRODUCER
from o_executor.run.deps import AgentGone
from o_runtime.eventlog import ConcurrencyConflict

if TYPE_CHECKING:
    from o_executor.service import ExecutorService

# Only an executor running the run appends these; seeing one we did not write
# means another executor has the run.
EXECUTOR_EVENTS = (
    RunStarted,
    LLMResponded,
    ToolCallRequested,
    ToolReturned,
    RunCompleted,
    RunSteered,
)
# A killed process may hold the projection's next event until its ack_wait ends.
PROJECTION_TIMEOUT = 60.0
MAX_CONFLICTS = 10


class RunTakenOver(Exception):
    """Another executor appended events of this run meanwhile: it owns the run now."""


class Recorder:
    def __init__(
        self,
        service: ExecutorService,
        command: Envelope[StartRun],
        last: int,
        steers: dict[str, RunSteerRequested] | None = None,
    ) -> None:
        self.s = service
        self.command = command
        self.cmd = command.data
        self.subject = self.cmd.lane.events
        # The subject's last sequence as this run knows it.
        self.last = last
        # A RunCancellationRequested for this run (or a RunQueued that interrupts it) was
        # read among the news.
        self.cancelled = False
        # Requests to steer this run, by their own run's id (shared with the run's deps).
        self.steers = steers if steers is not None else {}
        # Where this delivery's RunStarted landed (0: not recorded by it).
        self.started_seq = 0
        self._starting: asyncio.Task[int] | None = None

    def start(self, event: RunStarted) -> None:
        self._starting = asyncio.create_task(self.record(event, "started"))

    async def started(self) -> bool:
        await self._wait_start()
        return self.started_seq > 0

    async def _wait_start(self) -> None:
        starting, self._starting = self._starting, None
        if starting is not None:
            await starting

    async def close(self) -> None:
        """The run ended before its start was awaited (it failed early): let it go."""
        if self._starting is not None:
            self._starting.cancel()
            with contextlib.suppress(BaseException):
                await self._starting
            self._starting = None

    async def record(self, event: Event, key: str, *, even_if_gone: bool = False) -> int:
        if key != "started":
            # Events of the run follow its RunStarted on the subject.
            try:
                await self._wait_start()
            except AgentGone:
                if not even_if_gone:
                    raise
        envelope = self.command.caused(
            event,
            aggregate_id=self.cmd.agent_id,
            producer=PRODUCER,
            id=derived_id("evt", self.cmd.run_id, key),
        )
        for _ in range(MAX_CONFLICTS):
            try:
                appended = await self.s.eventlog.append(self.subject, envelope, self.last)
            except ConcurrencyConflict:
                await self._read_news(self.last)
                self.last = await self.s.eventlog.last_seq(self.subject)
                if not even_if_gone and not await self.agent_exists():
                    raise AgentGone(self.cmd.agent_id) from None
                continue
            self.last = max(self.last, appended.seq)
            if key == "started":
                self.started_seq = appended.seq
            return appended.seq
        raise RuntimeError(f"could not append to {self.subject}: too many conflicts")

    async def _read_news(self, since: int) -> None:
        """What others appended to the agent after `since` that concerns this run."""
        async for raw in self.s.eventlog.replay(self.subject, start_seq=since + 1):
            try:
                event = decode(raw.data).data
            except MalformedMessage:
                continue
            if isinstance(event, RunQueued):
                # A later message interrupts this run (concurrency interrupt or rollback).
                self.cancelled = self.cancelled or self.cmd.run_id in event.interrupts
                continue
            if getattr(event, "run_id", None) != self.cmd.run_id:
                continue
            if isinstance(event, RunSteerRequested):
                self.steers.setdefault(event.steer_run_id, event)
            elif isinstance(event, RunCancellationRequested):
                self.cancelled = True
            elif isinstance(event, EXECUTOR_EVENTS):
                raise RunTakenOver(self.cmd.run_id)

    async def agent_exists(self) -> bool:
        """Whether the agent exists as of the subject's last event we know of (checked)."""
        async with self.s.reads.at(self.last, AGENTS, timeout=PROJECTION_TIMEOUT) as conn:
            found = await conn.fetchval("SELECT 1 FROM agents WHERE id = $1", self.cmd.agent_id)
        return bool(found)
