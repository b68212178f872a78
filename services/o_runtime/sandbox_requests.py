"""Asking the tool sandbox to run a tool and waiting for the recorded outcome.

Used by the executor for a run's tool calls and by the gateway for tools the API
runs directly. The answer is the outcome *event* on the execution's subject
(`o.evt.sandbox.<command id>`), not a reply: a command sent again under the same
id is dropped by the stream as a duplicate and never answered, but its outcome
is in the log either way.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats.errors
from nats.js.errors import NotFoundError

from o_contracts import subjects
from o_contracts.commands import RunTool
from o_contracts.envelope import Envelope, decode
from o_contracts.events import ToolExecuted, ToolExecutionFailed
from o_runtime.eventlog import EventLog

# The sandbox's redelivery after a replica dies (its consumer's ack_wait) and
# the one retry an idempotent tool may get: callers wait for all of that and
# then give up, so nobody hangs on a sandbox.
SANDBOX_REDELIVERY = 10.0


def wait_budget(timeout: float) -> float:
    return 2 * (timeout + SANDBOX_REDELIVERY) + 5.0


async def request_execution(
    eventlog: EventLog, command: Envelope[RunTool], timeout: float, key: str | None = None
) -> dict[str, Any]:
    """Send the command (on the sandbox subject of `key`, default its agent) and wait for
    its outcome: status (success|error), tool_return, stdout, stderr.

    We listen on the execution's subject first, then send, then look for an outcome
    already recorded, so none can slip between.
    """
    subject = subjects.tool_execution_subject(command.id)
    sub = await eventlog.nc.subscribe(subject)
    try:
        await eventlog.send_command(
            subjects.sandbox_command_subject(key or command.data.agent_id), command
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
