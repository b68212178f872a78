"""Calling the tool sandbox for a user tool: one `RunTool` command, one reply, bounded waits."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

from o_contracts import subjects
from o_contracts.commands import RunTool
from o_contracts.envelope import Envelope
from o_contracts.ids import derived_id
from o_runtime.commands import CommandTimeout, send_and_wait
from o_runtime.eventlog import EventLog

# Wall-clock limit per tool call; the sandbox may enforce a lower one.
TOOL_TIMEOUT = float(os.environ.get("O_TOOL_TIMEOUT", "30"))
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
    agent: dict[str, Any],
    tool: dict[str, Any],
    run_id: str,
    tool_call_id: str,
    arguments: dict[str, Any],
    producer: str,
) -> dict[str, Any]:
    """The sandbox's reply result: status, tool_return, stdout, stderr."""
    budget = wait_budget(TOOL_TIMEOUT)
    command = cause.caused(
        RunTool(
            agent_id=agent["id"],
            run_id=run_id,
            tool_call_id=tool_call_id,
            tool_id=tool["id"],
            tool_name=tool["name"],
            source_code=tool["source_code"],
            arguments=arguments,
            # Ciphertext only: the executor holds no key and never sees a secret.
            encrypted_secrets=dict(agent.get("encrypted_secrets") or {}),
            timeout=TOOL_TIMEOUT,
            return_char_limit=tool["return_char_limit"],
            idempotent=tool["idempotent"],
            deadline=datetime.now(UTC) + timedelta(seconds=budget),
        ),
        aggregate_id=agent["id"],
        producer=producer,
        # One id per tool call: a resumed run re-sends the same command,
        # which the stream deduplicates and the sandbox answers from its record.
        id=derived_id("cmd", run_id, tool_call_id, "sandbox"),
    )
    try:
        reply = await send_and_wait(
            eventlog, subjects.sandbox_command_subject(agent["id"]), command, timeout=budget
        )
    except CommandTimeout:
        return {
            "status": "error",
            "tool_return": f"the tool sandbox did not answer within {budget:g}s; "
            "the tool may not have run",
            "stdout": [],
            "stderr": [],
        }
    if not reply.ok or reply.result is None:
        return {
            "status": "error",
            "tool_return": reply.error or "the sandbox refused the call",
            "stdout": [],
            "stderr": [],
        }
    return reply.result
