"""Calling the tool sandbox for a user tool: one `RunTool` command, its outcome event, a
bounded wait."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import nats.errors
from nats.js.errors import NotFoundError

from o_contracts import subjects
from o_contracts.commands import RunTool
from o_contracts.envelope import Envelope, decode
from o_contracts.events import ToolExecuted, ToolExecutionFailed
from o_contracts.ids import derived_id
from o_executor.run.agent import AgentConfig, UserTool
from o_runtime.eventlog import EventLog

# The sandbox's redelivery after a replica dies (its consumer's ack_wait) and
# the one retry an idempotent tool may get: the executor waits for all of that
# and then gives up, so a run never hangs on a sandbox.
SANDBOX_REDELIVERY = 10.0


def wait_budget(timeout: float) -> float:
    return 2 * (timeout + SANDBOX_REDELIVERY) + 5.0


async def run_user_tool(
    eventlog: EventLog,
    cause: Envelope[Any],
    *,
    agent: AgentConfig,
    tool: UserTool,
    run_id: str,
    tool_call_id: str,
    arguments: dict[str, Any],
    producer: str,
    timeout: float,
) -> dict[str, Any]:
    """The outcome: status (success|error), tool_return, stdout, stderr.

    `timeout`: the call's wall-clock limit (ExecutorSettings.tool_timeout).
    """
    budget = wait_budget(timeout)
    command = cause.caused(
        RunTool(
            agent_id=agent.id,
            run_id=run_id,
            tool_call_id=tool_call_id,
            tool_id=tool.id,
            tool_name=tool.name,
            source_code=tool.source_code,
            arguments=arguments,
            # Ciphertext only: the executor holds no key and never sees a secret.
            encrypted_secrets=dict(agent.encrypted_secrets),
            timeout=timeout,
            return_char_limit=tool.return_char_limit,
            idempotent=tool.idempotent,
            deadline=datetime.now(UTC) + timedelta(seconds=budget),
        ),
        aggregate_id=agent.id,
        producer=producer,
        # One id per tool call: a resumed run re-sends the same command,
        # which the stream deduplicates and the sandbox answers from its record.
        id=derived_id("cmd", run_id, tool_call_id, "sandbox"),
    )
    return await request_execution(eventlog, command, budget)


async def request_execution(
    eventlog: EventLog, command: Envelope[RunTool], timeout: float
) -> dict[str, Any]:
    """Send the command and wait for its outcome *event*, not a reply.

    A resumed run re-sends the same command id; within the stream's dedup
    window that publish is dropped as a duplicate and would never be
    answered. The outcome event on the execution's subject is there either
    way: we listen on the subject first, then send, then look for an outcome
    already recorded, so none can slip between.
    """
    subject = subjects.tool_execution_subject(command.id)
    sub = await eventlog.nc.subscribe(subject)
    try:
        await eventlog.send_command(
            subjects.sandbox_command_subject(command.data.agent_id), command
        )
        try:
            last = await eventlog.js.get_last_msg(subjects.EVENTS_STREAM, subject)
            outcome = _outcome(last.data or b"")
            if outcome is not None:
                return outcome
        except NotFoundError:
            pass
        async with asyncio.timeout(timeout):
            while True:
                msg = await sub.next_msg(timeout=timeout)
                outcome = _outcome(msg.data)
                if outcome is not None:
                    return outcome
    except (TimeoutError, nats.errors.TimeoutError):
        return _error(
            f"the tool sandbox did not answer within {timeout:g}s; the tool may not have run"
        )
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


def _outcome(raw: bytes) -> dict[str, Any] | None:
    event = decode(raw).data
    if isinstance(event, ToolExecuted):
        result = {"status": "success", "tool_return": event.tool_return}
    elif isinstance(event, ToolExecutionFailed):
        result = {"status": "error", "tool_return": event.error, "failure": event.failure}
    else:
        return None
    return result | {"stdout": event.stdout, "stderr": event.stderr, "sandbox": event.sandbox}


def _error(text: str) -> dict[str, Any]:
    return {"status": "error", "tool_return": text, "stdout": [], "stderr": []}
