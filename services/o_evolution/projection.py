"""The evolution service's read model (projection "evolution"): each agent's decisions
in order with their hash links, its configuration, versions, proposals with their cases
and reports, and the version it serves."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    CandidateEvaluated,
    CaseEvaluated,
    ChangeProposed,
    EvaluationStarted,
    EvolutionBudgetExhausted,
    EvolutionConfigured,
    EvolutionToolCalled,
    ProposalApproved,
    ProposalRefused,
    ProposalRejected,
    RolloutAborted,
    RolloutAdvanced,
    RolloutCompleted,
    RolloutStarted,
    VersionPromoted,
    VersionRolledBack,
)
from o_contracts.events.evolution import EvolutionDecided
from o_contracts.evolution import VersionSpec
from o_contracts.projection_names import EVOLUTION
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection

evolution = Projection(
    name=EVOLUTION,
    filter_subject=subjects.EVOLUTION_EVENTS,
    tables=[
        "evolution_history",
        "evolution_config",
        "agent_versions",
        "evolution_proposals",
        "evolution_cases",
        "evolution_serving",
        "evolution_rollouts",
    ],
)

D = TypeVar("D", bound=EvolutionDecided)
Apply = Callable[[asyncpg.Connection, D, Recorded], Awaitable[None]]


def decision(event_type: type[D]) -> Callable[[Apply[D]], Apply[D]]:
    """Register a handler that also keeps the decision in the agent's history."""

    def register(fn: Apply[D]) -> Apply[D]:
        @evolution.on(event_type)
        async def handle(conn: asyncpg.Connection, e: D, rec: Recorded) -> None:
            await conn.execute(
                "INSERT INTO evolution_history (agent_id, seq, type, prev_hash, hash, payload,"
                " created_at, event_id) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT DO NOTHING",
                e.agent_id,
                rec.seq,
                e.type_name(),
                e.prev_hash,
                e.hash,
                e.chain_payload(),
                rec.envelope.time,
                rec.envelope.id,
            )
            await fn(conn, e, rec)

        return fn

    return register


async def _version(
    conn: asyncpg.Connection,
    agent_id: str,
    spec: VersionSpec,
    rec: Recorded,
    parent_id: str | None = None,
    patch: Any = None,
    rationale: str = "",
    run_ids: list[str] | None = None,
) -> None:
    await conn.execute(
        "INSERT INTO agent_versions (agent_id, version_id, parent_id, spec, patch, rationale,"
        " run_ids, created_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT DO NOTHING",
        agent_id,
        spec.version_id,
        parent_id,
        spec.model_dump(mode="json"),
        patch,
        rationale,
        run_ids or [],
        rec.envelope.time,
    )


async def _proposal(conn: asyncpg.Connection, proposal_id: str, rec: Recorded, **set_: Any) -> None:
    await _update(conn, "evolution_proposals", "id", proposal_id, rec, set_)


async def _update(
    conn: asyncpg.Connection, table: str, key: str, value: str, rec: Recorded, set_: dict[str, Any]
) -> None:
    """Set columns of one row (and its updated_at, to the decision's time)."""
    assignments = ", ".join(f"{c} = ${i + 3}" for i, c in enumerate(set_))
    await conn.execute(
        f"UPDATE {table} SET updated_at = $2, {assignments} WHERE {key} = $1",
        value,
        rec.envelope.time,
        *set_.values(),
    )


@decision(EvolutionConfigured)
async def configured(conn: asyncpg.Connection, e: EvolutionConfigured, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO evolution_config (agent_id, config, updated_at) VALUES ($1, $2, $3)"
        " ON CONFLICT (agent_id) DO UPDATE SET config = $2, updated_at = $3",
        e.agent_id,
        e.config.model_dump(mode="json"),
        rec.envelope.time,
    )


@decision(ChangeProposed)
async def proposed(conn: asyncpg.Connection, e: ChangeProposed, rec: Recorded) -> None:
    await _version(conn, e.agent_id, e.parent, rec)
    patch = e.patch.model_dump(mode="json")
    await _version(
        conn, e.agent_id, e.candidate, rec, e.parent_version, patch, e.patch.rationale, e.run_ids
    )
    await conn.execute(
        "INSERT INTO evolution_proposals (id, agent_id, source, status, parent_version,"
        " candidate_version, patch, rationale, tokens, draft_tokens, created_at, updated_at)"
        " VALUES ($1,$2,$3,'proposed',$4,$5,$6,$7,$8,$8,$9,$9) ON CONFLICT DO NOTHING",
        e.proposal_id,
        e.agent_id,
        e.source,
        e.parent_version,
        e.candidate_version,
        patch,
        e.patch.rationale,
        e.tokens,
        rec.envelope.time,
    )


@decision(ProposalRefused)
async def refused(conn: asyncpg.Connection, e: ProposalRefused, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO evolution_proposals (id, agent_id, source, status, patch, rationale, reason,"
        " created_at, updated_at) VALUES ($1,$2,$3,'refused',$4,$5,$6,$7,$7)"
        " ON CONFLICT DO NOTHING",
        e.proposal_id,
        e.agent_id,
        e.source,
        e.patch.model_dump(mode="json") if e.patch else None,
        e.patch.rationale if e.patch else "",
        e.reason,
        rec.envelope.time,
    )


@decision(EvaluationStarted)
async def evaluation_started(conn: asyncpg.Connection, e: EvaluationStarted, rec: Recorded) -> None:
    await _proposal(conn, e.proposal_id, rec, status="evaluating")


@decision(CaseEvaluated)
async def case_evaluated(conn: asyncpg.Connection, e: CaseEvaluated, rec: Recorded) -> None:
    inserted = await conn.fetchval(
        "INSERT INTO evolution_cases (proposal_id, n, agent_id, body, tokens, created_at)"
        " VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT DO NOTHING RETURNING 1",
        e.proposal_id,
        e.n,
        e.agent_id,
        e.case.model_dump(mode="json"),
        e.tokens,
        rec.envelope.time,
    )
    if inserted:
        await conn.execute(
            "UPDATE evolution_proposals SET tokens = tokens + $2 WHERE id = $1",
            e.proposal_id,
            e.tokens,
        )


@decision(CandidateEvaluated)
async def evaluated(conn: asyncpg.Connection, e: CandidateEvaluated, rec: Recorded) -> None:
    await _proposal(
        conn,
        e.proposal_id,
        rec,
        status="accepted" if e.report.decision == "accepted" else "rejected",
        reason=e.report.reason,
        report=e.report.model_dump(mode="json"),
    )


@decision(ProposalApproved)
async def approved(conn: asyncpg.Connection, e: ProposalApproved, rec: Recorded) -> None:
    await _proposal(conn, e.proposal_id, rec, status="approved", approved=True)


@decision(ProposalRejected)
async def rejected(conn: asyncpg.Connection, e: ProposalRejected, rec: Recorded) -> None:
    await _proposal(conn, e.proposal_id, rec, status="rejected", approved=False, reason=e.reason)


async def _serve(conn: asyncpg.Connection, agent_id: str, version_id: str, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO evolution_serving (agent_id, version_id, updated_at) VALUES ($1, $2, $3)"
        " ON CONFLICT (agent_id) DO UPDATE SET version_id = $2, updated_at = $3",
        agent_id,
        version_id,
        rec.envelope.time,
    )


@decision(VersionPromoted)
async def promoted(conn: asyncpg.Connection, e: VersionPromoted, rec: Recorded) -> None:
    # (A change made on the agent as it had become is a version of its own: its parent
    # is the one served before.)
    await _version(conn, e.agent_id, e.spec, rec, parent_id=e.previous_version)
    await _serve(conn, e.agent_id, e.version_id, rec)
    if e.proposal_id is not None:
        await _proposal(conn, e.proposal_id, rec, status="promoted")
        # Its canary, if it had one, is over: the candidate is the agent now.
        await conn.execute(
            "UPDATE evolution_rollouts SET status = 'promoted', weight = 100, updated_at = $2"
            " WHERE proposal_id = $1 AND status IN ('running', 'completed')",
            e.proposal_id,
            rec.envelope.time,
        )


@decision(RolloutStarted)
async def rollout_started(conn: asyncpg.Connection, e: RolloutStarted, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO evolution_rollouts (rollout_id, agent_id, proposal_id, version_id, spec,"
        " stable_version, weight, steps, status, started_at, updated_at)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,'running',$9,$9) ON CONFLICT DO NOTHING",
        e.rollout_id,
        e.agent_id,
        e.proposal_id,
        e.version_id,
        e.spec.model_dump(mode="json"),
        e.stable_version,
        e.weight,
        e.steps,
        rec.envelope.time,
    )
    await _proposal(conn, e.proposal_id, rec, status="canary")


async def _rollout(conn: asyncpg.Connection, rollout_id: str, rec: Recorded, **set_: Any) -> None:
    await _update(conn, "evolution_rollouts", "rollout_id", rollout_id, rec, set_)


@decision(RolloutAdvanced)
async def rollout_advanced(conn: asyncpg.Connection, e: RolloutAdvanced, rec: Recorded) -> None:
    await _rollout(conn, e.rollout_id, rec, weight=e.weight, reason=e.reason)


@decision(RolloutCompleted)
async def rollout_completed(conn: asyncpg.Connection, e: RolloutCompleted, rec: Recorded) -> None:
    await _rollout(conn, e.rollout_id, rec, status="completed", reason=e.reason)
    await _proposal(conn, e.proposal_id, rec, status="awaiting_promotion")


@decision(RolloutAborted)
async def rollout_aborted(conn: asyncpg.Connection, e: RolloutAborted, rec: Recorded) -> None:
    await _rollout(conn, e.rollout_id, rec, status="aborted", weight=0.0, reason=e.reason)
    await _proposal(conn, e.proposal_id, rec, status="aborted", reason=e.reason)


@decision(VersionRolledBack)
async def rolled_back(conn: asyncpg.Connection, e: VersionRolledBack, rec: Recorded) -> None:
    # (A rollback too is made on the agent as it had become: the version it makes has the
    # one served before as its parent, so rolling back to its parent undoes it.)
    await _version(conn, e.agent_id, e.spec, rec, parent_id=e.previous_version)
    await _serve(conn, e.agent_id, e.version_id, rec)


@decision(EvolutionToolCalled)
async def tool_called(conn: asyncpg.Connection, e: EvolutionToolCalled, rec: Recorded) -> None:
    return None  # (its record in the history is what a repeat is answered from)


@decision(EvolutionBudgetExhausted)
async def exhausted(conn: asyncpg.Connection, e: EvolutionBudgetExhausted, rec: Recorded) -> None:
    return None


def as_json(value: Any) -> Any:
    """A jsonb column as Python (the pool decodes jsonb; kept for raw text)."""
    return json.loads(value) if isinstance(value, str) else value
