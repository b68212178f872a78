"""The executor process: agent runs (StartRun commands) and the runs/messages projection."""

from __future__ import annotations

from typing import Any

import asyncpg
import msgpack

from o_contracts import subjects
from o_contracts.base import Reply
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.models import ChatMessage
from o_contracts.projection_names import RUNS
from o_contracts.requests import (
    ContextRead,
    Generate,
    Generated,
    PreviewRun,
    ReadContext,
    RunPreviewed,
    first_error,
)
from o_contracts.subjects import Lane
from o_executor import agent_reads
from o_executor.context_overview import context_overview
from o_executor.generate import generate
from o_executor.history import HistoryCache
from o_executor.live.execution import LiveRun
from o_executor.preview import preview_run
from o_executor.projections import runs
from o_executor.provider_traces import TraceWriter
from o_executor.run.agent import AgentConfig
from o_executor.run.system_prompts import SystemPrompts
from o_executor.run_queue import MAX_PENDING_RUNS, RunQueue
from o_executor.settings import ExecutorSettings
from o_memory.core_memory import CoreMemory
from o_runtime import llm_providers, provider_registry
from o_runtime.commands import CommandConsumer, Delivery
from o_runtime.env import Env
from o_runtime.event_tap import EventTap
from o_runtime.liveness import liveness
from o_runtime.sdk_imports import import_sdks
from o_runtime.service import Service
from o_runtime.watched_answers import WatchedAnswers

# Requests (o.rpc.executor.*) one process answers at once.
REQUEST_WORKERS = 32
# Runs one process handles at once, of which half at most may be waiting for their turn
# behind their agent's earlier runs (run_queue.py).
RUN_HANDLERS = 16


class ExecutorService(Service):
    name = "executor"

    run_queue: RunQueue
    traces: TraceWriter
    history: HistoryCache
    prompts: SystemPrompts
    agent_events: EventTap
    generate_requests: WatchedAnswers

    def configure(self, env: Env) -> None:
        self.config = ExecutorSettings.from_env(env)

    def preload(self) -> None:
        # The SDKs of the configured providers' protocols, now rather than at a run's first
        # call (the anthropic SDK, ~38 MB, only if an Anthropic provider is configured).
        import_sdks(p.protocol for p in llm_providers.configured().values())

    async def setup(self) -> None:
        self.preload()  # (already done by a spare: the imports are then no-ops)
        provider_registry.bind(self.pool)
        self.run_queue = await RunQueue.open(self.eventlog, max_waiting=RUN_HANDLERS // 2)
        self.traces = await TraceWriter.open(self.eventlog.nc, self.config.provider_traces)
        self.history = HistoryCache(self.pool)
        self.prompts = SystemPrompts()
        # A run hears its conversation's events from the runs projection's consumer while
        # this process follows it (event_tap.py: no subscription of its own).
        self.agent_events = EventTap(self.eventlog.nc)
        self.project(runs, tap=self.agent_events)
        self.consume(
            CommandConsumer(
                self.eventlog,
                "executor",
                subjects.EXECUTOR_COMMANDS,
                {StartRun: self.start_run},
                # (why this short: ExecutorSettings.ack_wait)
                ack_wait=self.config.ack_wait,
                concurrency=RUN_HANDLERS,
                max_ack_pending=MAX_PENDING_RUNS,
                # A run reads its turn and state while its take is written (LiveRun._run).
                reads_before_held=True,
            )
        )
        # Completions outside runs (the gateway's generate routes, every memory's importance
        # and reflections), watched by their askers (o_runtime/watched_answers.py).
        alive = await liveness(self.eventlog)
        self.generate_requests = WatchedAnswers(
            self.eventlog.nc,
            subjects.EXECUTOR_GENERATE,
            "executor",
            alive.incarnation,
            self.generate,
            REQUEST_WORKERS,
        )
        # Many at once: a FastStream subscriber takes one message at a time unless told.
        self.broker.subscriber(
            subjects.EXECUTOR_READ_CONTEXT,
            queue="executor",
            title="an agent's context window",
            max_workers=REQUEST_WORKERS,
        )(self.read_context)
        self.broker.subscriber(
            subjects.EXECUTOR_PREVIEW_RUN,
            queue="executor",
            title="a run's first model request, built and not sent",
            max_workers=REQUEST_WORKERS,
        )(self.preview_run)

    async def started(self) -> None:
        await self.generate_requests.start()

    async def stopping(self) -> None:
        await self.generate_requests.stop()

    async def read_context(self, body: bytes) -> bytes:
        """Request: msgpack ReadContext; reply: msgpack ContextRead (errors included)."""
        try:
            request = ReadContext.model_validate(msgpack.unpackb(body, raw=False))
        except Exception as exc:  # malformed msgpack or a ValidationError
            return ContextRead(ok=False, status=422, error=first_error(exc)).encode()
        if request.min_seq:
            await self.watcher.wait(request.min_seq, RUNS)
        agent, core = await self.load_agent_and_core(request.agent_id)
        if agent is None or core is None:
            return ContextRead(
                ok=False, status=404, error=f"Agent {request.agent_id} not found"
            ).encode()
        history = await self.load_history(Lane(agent.id), exclude_run="")
        recall = await self.pool.fetchval(
            "SELECT count(*) FROM messages WHERE agent_id = $1", agent.id
        )
        overview = context_overview(agent, core, history, int(recall))
        return ContextRead(ok=True, overview=overview).encode()

    async def preview_run(self, body: bytes) -> bytes:
        """Request: msgpack PreviewRun; reply: msgpack RunPreviewed (errors included)."""
        try:
            request = PreviewRun.model_validate(msgpack.unpackb(body, raw=False))
        except Exception as exc:  # malformed msgpack or a ValidationError
            return RunPreviewed(ok=False, status=422, error=first_error(exc)).encode()
        if request.min_seq:
            await self.watcher.wait(request.min_seq, RUNS)
        return (await preview_run(self, request.command)).encode()

    async def generate(self, body: bytes) -> bytes:
        """Request: msgpack Generate; reply: msgpack Generated (errors included)."""
        try:
            request = Generate.model_validate(msgpack.unpackb(body, raw=False))
        except Exception as exc:  # malformed msgpack or a ValidationError
            return Generated(ok=False, status=422, error=first_error(exc)).encode()
        return (await generate(request, self.config.llm)).encode()

    async def start_run(self, envelope: Envelope[Any], delivery: Delivery) -> Reply:
        # One run per agent at a time across replicas, in arrival order; runs of
        # different agents proceed in parallel (run_queue.py explains how).
        # (It returns once the runs projection has applied the run: whoever
        # waited for the reply reads its write.)
        return await LiveRun(self, envelope, delivery).execute()

    async def load_agent(self, agent_id: str) -> AgentConfig | None:
        return await agent_reads.read_agent(self.pool, agent_id)

    async def load_agent_and_core(
        self, agent_id: str
    ) -> tuple[AgentConfig | None, CoreMemory | None]:
        return await agent_reads.read_agent_and_core(self.pool, agent_id)

    async def load_history(
        self, lane: Lane, exclude_run: str, conn: asyncpg.Connection | None = None
    ) -> list[ChatMessage]:
        return await self.history.load(lane, exclude_run, conn)
