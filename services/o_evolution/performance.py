"""How an agent's recent runs went, as the agent reads it (its `evolution_performance_report`
tool) and as its proposals are drafted from it (o_evolution/proposer.py): one digest, so
what the agent sees is what the gate judges.

The figures are per run and by the gate's own slices (o_evolution/gate.py: tools used,
stop reason, feedback, conversation), for the version served now against the one before
it (runs before and after the last promotion or rollback), and the agent's earlier
proposals are listed by the fields they touched, so it need not try again what the
gate already rejected.

`report` is pure; `read_runs` and `read_proposals` are its reads.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import asyncpg

from o_contracts.evolution import Patch
from o_evolution.feedback import rated_steps_of, run_feedback
from o_evolution.patches import field_of

Version = Literal["current", "previous"]
# Runs a report reads unless asked for more or fewer.
DEFAULT_RUNS = 30
# Slices shown per kind before "and N more".
SHOWN_SLICES = 6


@dataclass(frozen=True)
class RunFacts:
    run_id: str
    conversation_id: str | None
    stop_reason: str | None
    failed: bool
    steps: int
    tokens: int
    latency_ms: float | None
    tool_errors: int
    tools_used: tuple[str, ...]
    feedback: Literal["positive", "negative"] | None
    version: Version


@dataclass(frozen=True)
class PastProposal:
    proposal_id: str
    source: str
    status: str
    reason: str | None
    fields: tuple[str, ...]
    rationale: str


def _figures(runs: Sequence[RunFacts]) -> str:
    n = len(runs)
    if not n:
        return "no runs"
    failed = sum(r.failed for r in runs)
    with_tool_errors = sum(r.tool_errors > 0 for r in runs)
    latencies = [r.latency_ms for r in runs if r.latency_ms is not None]
    latency = f", median {statistics.median(latencies):.0f} ms" if latencies else ""
    negative = sum(r.feedback == "negative" for r in runs)
    positive = sum(r.feedback == "positive" for r in runs)
    return (
        f"{n} runs, {failed} failed ({failed / n:.0%}), {sum(r.tool_errors for r in runs)}"
        f" tool errors in {with_tool_errors} runs ({with_tool_errors / n:.0%}),"
        f" {sum(r.steps for r in runs) / n:.1f} steps and"
        f" {sum(r.tokens for r in runs) / n:.0f} tokens per run{latency};"
        f" feedback: {negative} negative, {positive} positive"
    )


def _slices(run: RunFacts) -> list[str]:
    # The gate's slice names (gate.slice_names), read off live runs.
    names = [f"tool:{t}" for t in sorted(set(run.tools_used))]
    names.append(f"stop:{run.stop_reason or 'error'}")
    if run.feedback is not None:
        names.append(f"feedback:{run.feedback}")
    names.append(f"conversation:{run.conversation_id or 'default'}")
    return names


def report(runs: Sequence[RunFacts], proposals: Sequence[PastProposal]) -> str:
    """The agent's performance digest, as plain text a model reads."""
    lines = [f"Recent runs (newest {len(runs)}): {_figures(runs)}."]
    current = [r for r in runs if r.version == "current"]
    previous = [r for r in runs if r.version == "previous"]
    if previous:
        lines.append(f"Current version: {_figures(current)}.")
        lines.append(f"Previous version: {_figures(previous)}.")
    stops: dict[str, int] = defaultdict(int)
    for r in runs:
        stops[r.stop_reason or "error"] += 1
    if stops:
        lines.append(
            "Stop reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(stops.items())) + "."
        )
    by_slice: dict[str, list[RunFacts]] = defaultdict(list)
    for r in runs:
        for name in _slices(r):
            by_slice[name].append(r)
    if by_slice:
        lines.append("By slice:")
        for kind in ("tool", "stop", "feedback", "conversation"):
            names = sorted(
                (n for n in by_slice if n.startswith(kind + ":")),
                key=lambda n: (-len(by_slice[n]), n),
            )
            for name in names[:SHOWN_SLICES]:
                lines.append(f"- {name}: {_figures(by_slice[name])}")
            if len(names) > SHOWN_SLICES:
                lines.append(f"- and {len(names) - SHOWN_SLICES} more {kind} slices")
    for r in runs:
        if r.failed or r.tool_errors:
            lines.append(
                f"- run {r.run_id}: stop {r.stop_reason}, {r.steps} steps,"
                f" {r.tool_errors} tool errors"
            )
    if proposals:
        lines.append("Earlier proposals (newest first), by the fields they touched:")
        for p in proposals:
            why = f" ({p.reason})" if p.reason else ""
            lines.append(
                f"- {p.proposal_id} [{', '.join(p.fields) or 'nothing'}] from {p.source}:"
                f" {p.status}{why}. Rationale: {p.rationale or '(none)'}"
            )
        lines.append(
            "Do not propose again a change the gate rejected unless the runs above show"
            " the evidence changed."
        )
    return "\n".join(lines)


_RUNS = (
    "SELECT r.id, r.conversation_id, r.stop_reason, r.status, r.step_count,"
    " coalesce((r.usage->>'total_tokens')::bigint, 0) AS tokens,"
    " extract(epoch FROM (r.completed_at - r.created_at)) * 1000 AS latency_ms,"
    " r.created_at,"
    " (SELECT count(*) FROM messages m WHERE m.run_id = r.id AND m.role = 'tool'"
    "  AND m.body->>'status' = 'error') AS tool_errors,"
    " (SELECT coalesce(array_agg(m.body->>'name' ORDER BY m.seq), '{}') FROM messages m"
    "  WHERE m.run_id = r.id AND m.role = 'tool') AS tools_used,"
    f" {rated_steps_of('r')} AS ratings"
    " FROM runs r WHERE r.agent_id = $1 AND r.status IN ('completed', 'failed')"
    " AND NOT r.background ORDER BY r.created_at DESC LIMIT $2"
)
_SERVED_SINCE = "SELECT updated_at FROM evolution_serving WHERE agent_id = $1"
_PROPOSALS = (
    "SELECT id, source, status, reason, patch, rationale FROM evolution_proposals"
    " WHERE agent_id = $1 ORDER BY created_at DESC LIMIT $2"
)


async def read_runs(pool: asyncpg.Pool, agent_id: str, limit: int) -> list[RunFacts]:
    since: datetime | None = await pool.fetchval(_SERVED_SINCE, agent_id)
    return [_facts(row, since) for row in await pool.fetch(_RUNS, agent_id, limit)]


def _facts(row: Any, since: datetime | None) -> RunFacts:
    return RunFacts(
        run_id=row["id"],
        conversation_id=row["conversation_id"],
        stop_reason=row["stop_reason"],
        failed=row["status"] == "failed" or row["stop_reason"] == "max_steps",
        steps=int(row["step_count"] or 0),
        tokens=int(row["tokens"]),
        latency_ms=float(row["latency_ms"]) if row["latency_ms"] is not None else None,
        tool_errors=int(row["tool_errors"]),
        tools_used=tuple(t for t in row["tools_used"] if t),
        feedback=run_feedback(row["ratings"]),
        version="previous" if since is not None and row["created_at"] < since else "current",
    )


async def read_proposals(pool: asyncpg.Pool, agent_id: str, limit: int = 10) -> list[PastProposal]:
    out = []
    for row in await pool.fetch(_PROPOSALS, agent_id, limit):
        fields: tuple[str, ...] = ()
        if row["patch"] is not None:
            patch = Patch.model_validate(row["patch"])
            fields = tuple(dict.fromkeys(_touched(op) for op in patch.ops))
        out.append(
            PastProposal(
                row["id"], row["source"], row["status"], row["reason"], fields, row["rationale"]
            )
        )
    return out


def _touched(op: Any) -> str:
    # A text edit names its target (system, block:persona); others their field.
    target = getattr(op, "target", None)
    return str(target) if target else field_of(op)
