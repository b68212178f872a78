"""Letta's RunMetrics and StepMetrics, from the runs projection.

A step's times come from its `LLMResponded` (when the step began, when the model was
asked and how long it took, measured by the executor) and from when its last tool
returned in its run (`steps.tools_returned_at`): its tools took from the model's answer
to then, and the step from its start to then (or to the answer, with no tools).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from o_contracts.base_tools import SCHEMAS
from o_gateway.tools_catalog import tool_state


def epoch_ns(when: datetime | None) -> int | None:
    """A timestamp as nanoseconds since the epoch (microsecond precision, as stored)."""
    if when is None:
        return None
    return (int(when.timestamp()) * 1_000_000 + when.microsecond) * 1000


def run_metrics(
    run: dict[str, Any], tools_used: list[str], first_step_ns: int | None = None
) -> dict[str, Any]:
    """`first_step_ns`: when its first step began, which may be a little before the run's
    record was stamped (the executor records the start and begins the step at once)."""
    start = epoch_ns(run["created_at"])
    if start is not None and first_step_ns is not None:
        start = min(start, first_step_ns)
    end = epoch_ns(run["completed_at"])
    return {
        "id": run["id"],
        "organization_id": None,
        "agent_id": run["agent_id"],
        "project_id": None,
        "run_start_ns": start,
        "run_ns": end - start if end is not None and start is not None else None,
        "num_steps": run["step_count"],
        "tools_used": tools_used,
        "template_id": None,
        "base_template_id": None,
    }


def step_metrics(step: dict[str, Any]) -> dict[str, Any]:
    answered = epoch_ns(step["created_at"])
    returned = epoch_ns(step["tools_returned_at"])
    start = step["step_start_ns"]
    end = returned if returned is not None else answered
    return {
        "id": step["id"],
        "organization_id": None,
        "provider_id": None,
        "run_id": step["run_id"],
        "agent_id": step["agent_id"],
        "step_start_ns": start,
        "llm_request_start_ns": step["llm_request_start_ns"],
        "llm_request_ns": step["llm_request_ns"],
        "tool_execution_ns": (
            max(returned - answered, 0) if returned is not None and answered is not None else None
        ),
        "step_ns": max(end - start, 0) if start is not None and end is not None else None,
        "base_template_id": None,
        "template_id": None,
        "project_id": None,
    }


# The names of the tools a run's model called, each once, in the order first called.
_CALLED = (
    "SELECT c->>'name' AS name, min(m.seq) AS first FROM messages m,"
    " jsonb_array_elements(coalesce(m.body->'tool_calls', '[]')) c"
    " WHERE m.run_id = $1 AND m.role = 'assistant' GROUP BY 1 ORDER BY 2"
)


async def tools_used(pool: asyncpg.Pool, agent_id: str, run_id: str) -> list[str]:
    """The ids of the tools a run called (Letta's `tools_used`): the agent's own tools by
    name (its Python and MCP tools), else O's built-in ones; a client-side tool has none."""
    names = [r["name"] for r in await pool.fetch(_CALLED, run_id)]
    if not names:
        return []
    rows = await pool.fetch(
        "SELECT t.name, t.id FROM agents a JOIN tools t ON t.id = ANY(a.tool_ids)"
        " WHERE a.id = $1 AND t.name = ANY($2)"
        " UNION ALL SELECT m.name, m.id FROM agents a JOIN mcp_tools m ON m.id = ANY(a.tool_ids)"
        " WHERE a.id = $1 AND m.name = ANY($2)",
        agent_id,
        names,
    )
    own = {r["name"]: r["id"] for r in rows}
    ids = [own.get(n) or (tool_state(n)["id"] if n in SCHEMAS else None) for n in names]
    return [i for i in ids if i is not None]
