"""Calling the tool sandbox for a run's user tool: one `RunTool` command, run once and
recorded, with a bounded wait (o_runtime/sandbox_requests.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from o_contracts.commands import RunTool
from o_contracts.envelope import Envelope
from o_contracts.ids import derived_id
from o_executor.run.agent import AgentConfig, UserTool
from o_runtime.eventlog import EventLog
from o_runtime.sandbox_requests import request_execution, wait_budget

__all__ = ["request_execution", "run_user_tool"]


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
            encrypted_secrets=agent.sandbox.environment(agent.encrypted_secrets),
            timeout=timeout,
            return_char_limit=tool.return_char_limit,
            idempotent=tool.idempotent,
            requirements=agent.sandbox.packages(tool.requirements),
            deadline=datetime.now(UTC) + timedelta(seconds=budget),
        ),
        aggregate_id=agent.id,
        producer=producer,
        # One id per tool call: a resumed run finds the execution it recorded.
        id=derived_id("cmd", run_id, tool_call_id, "sandbox"),
    )
    return await request_execution(eventlog, command, budget, producer)
