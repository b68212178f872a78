"""Handling `RunTool`: run the tool once per execution, record the outcome, answer.

Each execution has its own subject, `o.evt.sandbox.<command id>`, holding
`ToolExecutionStarted` and then one outcome. What a delivery of the command
finds there decides what it does:

- nothing: record Started, run, record the outcome;
- an outcome: an earlier delivery finished but its ack or reply was lost —
  answer with the recorded outcome, run nothing;
- Started without outcome: the sandbox running it died mid-call. An
  idempotent tool runs once more; any other tool, or a second death, records
  `ToolExecutionFailed(failure="interrupted")`, because running a tool with
  side effects twice is worse than reporting that it may have half-run.

The consumer's max_deliver bounds the redeliveries; the executor's wait has a
timeout; and a command delivered after its deadline is refused, not run.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import UTC, datetime
from typing import Any

from nats.js.errors import NotFoundError

from o_contracts import subjects
from o_contracts.base import Event, Reply
from o_contracts.commands import RunTool
from o_contracts.envelope import Envelope, decode
from o_contracts.events import ToolExecuted, ToolExecutionFailed, ToolExecutionStarted
from o_runtime.commands import Delivery
from o_runtime.eventlog import ConcurrencyConflict, EventLog
from o_runtime.instruments import measured
from o_runtime.tool_secrets import SecretsUnavailable, decrypt_all
from o_tool_sandbox.pool import Outcome, WorkerPool

log = logging.getLogger(__name__)
PRODUCER = "tool_sandbox"
MAX_ATTEMPTS = 2


def replica_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _lines(text: str) -> list[str]:
    return text.splitlines() if text else []


class Executions:
    def __init__(self, eventlog: EventLog, pool: WorkerPool, name: str) -> None:
        self.eventlog = eventlog
        self.pool = pool
        self.name = name

    async def _last(self, subject: str) -> tuple[int, Event | None]:
        try:
            msg = await self.eventlog.js.get_last_msg(subjects.EVENTS_STREAM, subject)
        except NotFoundError:
            return 0, None
        data = decode(msg.data or b"").data
        assert isinstance(data, Event)
        return int(msg.seq or 0), data

    async def run_tool(self, envelope: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: RunTool = envelope.data
        subject = subjects.tool_execution_subject(envelope.id)
        while True:
            seq, last = await self._last(subject)
            if isinstance(last, ToolExecuted | ToolExecutionFailed):
                return _reply(seq, last)
            attempt = last.attempt + 1 if isinstance(last, ToolExecutionStarted) else 1
            outcome: ToolExecuted | ToolExecutionFailed
            if datetime.now(UTC) > cmd.deadline:
                outcome = self._failed(envelope, attempt, "expired", "the caller stopped waiting")
            elif attempt > 1 and (not cmd.idempotent or attempt > MAX_ATTEMPTS):
                why = (
                    "it is not declared idempotent, so it was not run again"
                    if not cmd.idempotent
                    else "it was retried once already"
                )
                outcome = self._failed(
                    envelope,
                    attempt - 1,
                    "interrupted",
                    f"the sandbox running this tool stopped mid-call; {why}",
                )
            else:
                started = ToolExecutionStarted(
                    execution_id=envelope.id,
                    agent_id=cmd.agent_id,
                    run_id=cmd.run_id,
                    tool_call_id=cmd.tool_call_id,
                    tool_name=cmd.tool_name,
                    attempt=attempt,
                    sandbox=self.name,
                )
                try:
                    seq = await self._append(envelope, subject, started, seq)
                except ConcurrencyConflict:
                    continue  # another delivery moved first: decide again
                outcome = await self._execute(envelope, cmd, attempt)
            try:
                appended = await self._append(envelope, subject, outcome, seq)
            except ConcurrencyConflict:
                continue
            return _reply(appended, outcome)

    async def _append(self, cause: Envelope[Any], subject: str, event: Event, last: int) -> int:
        env = cause.caused(event, aggregate_id=cause.id, producer=PRODUCER)
        return (await self.eventlog.append(subject, env, expected_last_seq=last)).seq

    async def _execute(
        self, envelope: Envelope[Any], cmd: RunTool, attempt: int
    ) -> ToolExecuted | ToolExecutionFailed:
        try:
            env = decrypt_all(cmd.encrypted_secrets)
        except SecretsUnavailable as exc:
            measured.sandbox_executions.add(1, {"outcome": "refused"})
            return self._failed(envelope, attempt, "refused", str(exc))
        if not _isolated(self.pool.isolation):
            measured.sandbox_executions.add(1, {"outcome": "refused"})
            return self._failed(
                envelope,
                attempt,
                "refused",
                "this sandbox cannot cut tools off from the network here "
                "(no network namespace and no seccomp); refusing to run user code",
            )
        result: Outcome = await self.pool.run(
            cmd.source_code, cmd.tool_name, cmd.arguments, env, cmd.timeout
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
            "attempt": attempt,
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

    def _failed(
        self, envelope: Envelope[Any], attempt: int, failure: str, error: str
    ) -> ToolExecutionFailed:
        cmd: RunTool = envelope.data
        return ToolExecutionFailed(
            execution_id=envelope.id,
            agent_id=cmd.agent_id,
            run_id=cmd.run_id,
            tool_call_id=cmd.tool_call_id,
            tool_name=cmd.tool_name,
            failure=failure,
            error=error,
            attempt=attempt,
            sandbox=self.name,
        )


def _isolated(isolation: dict[str, Any]) -> bool:
    return "network" in isolation.get("namespaces", []) or bool(isolation.get("seccomp"))


def _reply(seq: int, outcome: Event) -> Reply:
    if isinstance(outcome, ToolExecuted):
        result = {"status": "success", "tool_return": outcome.tool_return}
    else:
        assert isinstance(outcome, ToolExecutionFailed)
        result = {"status": "error", "tool_return": outcome.error, "failure": outcome.failure}
    return Reply(
        ok=True,
        seq=seq,
        result=result
        | {"stdout": outcome.stdout, "stderr": outcome.stderr, "sandbox": outcome.sandbox},
    )
