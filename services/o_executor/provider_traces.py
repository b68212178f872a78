"""Each step's exchange with its model provider, kept for `GET /v1/steps/{id}/trace`
(o_contracts/provider_traces.py says what a trace is and where it lives).

Written after the model answered, by a task of its own: a run never waits for its trace,
and a trace that cannot be written (the bucket gone, NATS away) is dropped with a log line,
never a run's failure. At most MAX_IN_FLIGHT writes at once; more are dropped.

A put is a plain publish onto the bucket's subject, with no acknowledgement asked: the
stream stores it all the same, and waiting for its ack cost a run as much as the rest of
the write (bench/README.md, "Provider traces"). A trace lost on its way is a diagnostic
lost, never data.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from nats.aio.client import Client
from nats.js.errors import BucketNotFoundError

from o_contracts import subjects
from o_contracts.ids import derived_id
from o_contracts.provider_traces import ProviderTrace
from o_executor.llm import LLMResult
from o_executor.providers import Handle
from o_runtime.instruments import measured

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 32


class TraceWriter:
    def __init__(self, nc: Client | None) -> None:
        self._nc = nc
        self._writing: set[asyncio.Task[None]] = set()
        self.dropped = 0

    @classmethod
    async def open(cls, nc: Client, enabled: bool) -> TraceWriter:
        """Off (writes nothing) unless `enabled` and the bucket is there (the setup role
        makes it: o_setup/topology.py)."""
        if not enabled:
            return cls(None)
        try:
            await nc.jetstream().key_value(subjects.PROVIDER_TRACES_BUCKET)
        except BucketNotFoundError:
            log.warning("no %s bucket: steps' traces are not kept", subjects.PROVIDER_TRACES_BUCKET)
            return cls(None)
        return cls(nc)

    @property
    def enabled(self) -> bool:
        return self._nc is not None

    def write(
        self, step_id: str, run_id: str, agent_id: str, handle: Handle, result: LLMResult
    ) -> None:
        if self._nc is None or result.exchange is None:
            return
        if len(self._writing) >= MAX_IN_FLIGHT:
            self._dropped("busy")
            return
        task = asyncio.create_task(self._put(self._nc, step_id, run_id, agent_id, handle, result))
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    async def _put(
        self,
        nc: Client,
        step_id: str,
        run_id: str,
        agent_id: str,
        handle: Handle,
        result: LLMResult,
    ) -> None:
        assert result.exchange is not None
        try:
            trace = ProviderTrace(
                id=derived_id("provider_trace", step_id),
                step_id=step_id,
                run_id=run_id,
                agent_id=agent_id,
                request_json=result.exchange.request,
                response_json=result.exchange.response(),
                llm_config={
                    "handle": str(handle),
                    "model": handle.model,
                    "provider_name": handle.provider,
                },
                created_at=datetime.now(UTC).isoformat(),
            )
            await nc.publish(f"$KV.{subjects.PROVIDER_TRACES_BUCKET}.{step_id}", trace.encode())
        except Exception as exc:  # diagnostics only: the run goes on without its trace
            self._dropped("failed")
            log.warning("step %s: its provider trace was not kept: %s", step_id, exc)

    def _dropped(self, reason: str) -> None:
        self.dropped += 1
        measured.provider_traces_dropped.add(1, {"reason": reason})

    async def flush(self) -> None:
        """Wait for the writes under way to reach NATS (at shutdown, and in tests)."""
        if self._writing:
            await asyncio.gather(*self._writing, return_exceptions=True)
        if self._nc is not None:
            await self._nc.flush()
