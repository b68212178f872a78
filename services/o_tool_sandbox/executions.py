"""Answering `o.rpc.sandbox.run`: run a user's tool once per execution, answer its outcome.

The sandbox runs users' code, so it holds no JetStream access (docs/security.md): it
records nothing. The executor records the execution (`ToolExecutionStarted`, then the
outcome this module answers with) on `o.evt.sandbox.<execution id>` and decides what a
call interrupted by a death means (o_executor/sandbox_calls.py).

A replica keeps the executions it runs, and for a while those it ran, by id:

- a request for an execution it is running waits for that run, never starts a second;
- `o.rpc.sandbox.executions` asks every replica who holds an execution: the holder
  answers (running, or done with the outcome), the others stay silent. The executor asks
  while it waits (a replica that died answers no more) and after it resumed a run whose
  call was in flight (the outcome is then taken from the replica that ran it).

A request past its `deadline` (its caller gave up) is answered `expired`, not run.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import socket
import time
import uuid
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

from o_contracts.base import Event
from o_contracts.commands import RunTool
from o_contracts.envelope import Envelope, MalformedMessage, decode
from o_contracts.events import ToolExecuted, ToolExecutionFailed
from o_contracts.requests import ExecutionState, ExecutionStatus
from o_runtime.instruments import measured
from o_runtime.tool_secrets import SecretsUnavailable, decrypt_all
from o_tool_sandbox.packages import Packages, PackagesUnavailable
from o_tool_sandbox.pool import Outcome, WorkerPool

log = logging.getLogger(__name__)
PRODUCER = "tool_sandbox"
# Finished executions a replica still answers for (by count and age): long enough for an
# executor that took over a run to ask.
KEEP_DONE = 1000
KEEP_DONE_SECONDS = 600.0


def replica_name() -> str:
    """This process's name in outcomes and on its liveness subject (a NATS subject token)."""
    host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _lines(text: str) -> list[str]:
    return text.splitlines() if text else []


class Executions:
    def __init__(self, pool: WorkerPool, name: str, packages: Packages) -> None:
        self.pool = pool
        self.name = name
        self.packages = packages
        self._running: dict[str, asyncio.Task[bytes]] = {}
        self._done: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    async def run(self, body: bytes) -> bytes:
        """A `RunTool` envelope in; an `ExecutionState` out (done, or refused)."""
        try:
            envelope = decode(body, storable=True)
            if not isinstance(envelope.data, RunTool):
                raise MalformedMessage(f"expected RunTool, not {envelope.type}")
        except MalformedMessage as exc:
            return ExecutionState(state="refused", replica=self.name, error=str(exc)).encode()
        outcome = self._outcome_of(envelope.id)
        if outcome is None:
            task = self._running.get(envelope.id)
            if task is None:
                task = asyncio.create_task(self._execute(envelope))
                self._running[envelope.id] = task
                task.add_done_callback(functools.partial(self._finished, envelope.id))
            # (shielded: a caller gone must not cancel the tool's run for another asker)
            outcome = await asyncio.shield(task)
        return ExecutionState(state="done", replica=self.name, outcome=outcome).encode()

    def status(self, body: bytes) -> bytes | None:
        """The state of an execution this replica holds; None (no answer) otherwise."""
        try:
            asked = ExecutionStatus.decode(body)
        except Exception:
            return None
        outcome = self._outcome_of(asked.execution_id)
        if outcome is not None:
            return ExecutionState(state="done", replica=self.name, outcome=outcome).encode()
        if asked.execution_id in self._running:
            return ExecutionState(state="running", replica=self.name).encode()
        return None

    def _outcome_of(self, execution_id: str) -> bytes | None:
        now = time.monotonic()
        while self._done:
            oldest, (at, _) = next(iter(self._done.items()))
            if now - at < KEEP_DONE_SECONDS and len(self._done) <= KEEP_DONE:
                break
            del self._done[oldest]
        kept = self._done.get(execution_id)
        return kept[1] if kept is not None else None

    def _finished(self, execution_id: str, task: asyncio.Task[bytes]) -> None:
        self._running.pop(execution_id, None)
        if not task.cancelled() and task.exception() is None:
            self._done[execution_id] = (time.monotonic(), task.result())

    async def _execute(self, envelope: Envelope[Any]) -> bytes:
        cmd: RunTool = envelope.data
        outcome: Event
        if datetime.now(UTC) > cmd.deadline:
            outcome = self._failed(envelope, "expired", "the caller stopped waiting")
        else:
            outcome = await self._run(envelope, cmd)
        return envelope.caused(outcome, aggregate_id=envelope.id, producer=PRODUCER).encode()

    async def _run(self, envelope: Envelope[Any], cmd: RunTool) -> Event:
        try:
            env = decrypt_all(cmd.encrypted_secrets) | _identifiers(cmd)
        except SecretsUnavailable as exc:
            measured.sandbox_executions.add(1, {"outcome": "refused"})
            return self._failed(envelope, "refused", str(exc))
        if not _isolated(self.pool.isolation):
            measured.sandbox_executions.add(1, {"outcome": "refused"})
            return self._failed(
                envelope,
                "refused",
                "this sandbox cannot cut tools off from the network here "
                "(no network namespace and no seccomp); refusing to run user code",
            )
        try:
            packages = await self.packages.path_for(cmd.requirements)
        except PackagesUnavailable as exc:
            measured.sandbox_executions.add(1, {"outcome": "packages"})
            return self._failed(envelope, "packages", str(exc))
        result: Outcome = await self.pool.run(
            cmd.source_code,
            cmd.tool_name,
            cmd.arguments,
            env,
            cmd.timeout,
            [packages] if packages else None,
        )
        ended = {"outcome": "success" if result.ok else result.failure or "error"}
        measured.sandbox_executions.add(1, ended)
        measured.sandbox_duration.record(result.duration_ms / 1000, ended)
        common: dict[str, Any] = {
            "execution_id": envelope.id,
            "agent_id": cmd.agent_id,
            "run_id": cmd.run_id,
            "tool_call_id": cmd.tool_call_id,
            "tool_name": cmd.tool_name,
            "stdout": _lines(result.stdout),
            "stderr": _lines(result.stderr),
            "duration_ms": result.duration_ms,
            "sandbox": self.name,
        }
        if result.ok:
            text = result.tool_return
            if len(text) > cmd.return_char_limit:
                text = (
                    text[: cmd.return_char_limit]
                    + f"\n[truncated: the return was {len(text)} characters, "
                    f"over this tool's limit of {cmd.return_char_limit}]"
                )
            return ToolExecuted(tool_return=text, **common)
        return ToolExecutionFailed(failure=result.failure, error=result.error, **common)

    def _failed(self, envelope: Envelope[Any], failure: str, error: str) -> ToolExecutionFailed:
        cmd: RunTool = envelope.data
        return ToolExecutionFailed(
            execution_id=envelope.id,
            agent_id=cmd.agent_id,
            run_id=cmd.run_id,
            tool_call_id=cmd.tool_call_id,
            tool_name=cmd.tool_name,
            failure=failure,
            error=error,
            sandbox=self.name,
        )


def _identifiers(cmd: RunTool) -> dict[str, str]:
    """As Letta's tools get them, over any variable of the same name: which agent and tool
    this run is for (none for source run on its own)."""
    named = {"LETTA_AGENT_ID": cmd.agent_id, "LETTA_TOOL_ID": cmd.tool_id}
    return {k: v for k, v in named.items() if v}


def _isolated(isolation: dict[str, Any]) -> bool:
    # (Let out by the operator, O_SANDBOX_NETWORK: there is nothing to cut off.)
    return (
        bool(isolation.get("network"))
        or "network" in isolation.get("namespaces", [])
        or bool(isolation.get("seccomp"))
    )
