"""Self-evolution, O's extension: `/v1/agents/{agent_id}/evolution/...` (tag "evolution").

Every change is a command to the evolution service, which decides it and appends the
decision to the agent's hash-chained evolution subject (docs/evolution.md); reads come
from its projection, and `verify` checks the chain on the log itself.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from o_contracts import subjects
from o_contracts.base import Command, Reply
from o_contracts.envelope import Envelope, MalformedMessage, decode
from o_contracts.events.evolution import EvolutionDecided
from o_contracts.evolution import EvolutionConfig, Patch, VersionSpec
from o_contracts.evolution_commands import (
    AbortRollout,
    ConfigureEvolution,
    EvaluateProposal,
    PromoteProposal,
    ProposeChange,
    ReviewProposal,
    RollBackVersion,
    StartRollout,
)
from o_contracts.ids import derived_id, new_id
from o_contracts.projection_names import AGENTS, EVOLUTION
from o_evolution.chain import Link, verify
from o_evolution.patches import diff
from o_gateway.commands import PRODUCER, answered
from o_gateway.idempotency import IdempotencyKey, checked_key, resource_id
from o_gateway.routes.paths import route
from o_gateway.state import GW, Gateway

router = APIRouter(tags=["evolution"])
PREFIX = "/v1/agents/{agent_id}/evolution"
COMMAND_TIMEOUT = 30.0


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProposeBody(Body):
    # None: the agent's own model proposes, from a digest of its recent runs.
    patch: Patch | None = None


class ReviewBody(Body):
    note: str = Field(default="", max_length=2000)


class AbortBody(Body):
    reason: str = Field(default="aborted by an operator", max_length=2000)


# The live runs of a canary's current step, per arm (what its next analysis will count).
_ARMS = (
    "SELECT rollout_arm, count(*) AS runs,"
    " count(*) FILTER (WHERE status = 'failed' OR stop_reason = 'max_steps') AS failed"
    " FROM runs WHERE rollout_id = $1 AND rollout_weight = $2"
    " AND status IN ('completed', 'failed') GROUP BY rollout_arm"
)


class RollbackBody(Body):
    version_id: str = Field(min_length=1)
    reason: str = Field(default="", max_length=2000)


async def _command(
    gw: Gateway, command: Command, agent_id: str, timeout: float, command_id: str | None = None
) -> Reply:
    await gw.agent_row(agent_id)
    envelope = Envelope.wrap(command, aggregate_id=agent_id, producer=PRODUCER, id=command_id)
    reply = await answered(
        gw,
        subjects.evolution_command_subject(agent_id),
        envelope,
        timeout,
        "the evolution service did not answer in time; the decision may still come",
    )
    result = reply.result or {}
    await gw.visible(result.get("decision_seq", reply.seq), EVOLUTION)
    await gw.visible(result.get("agent_seq"), AGENTS)
    return reply


async def _config(gw: Gateway, agent_id: str) -> EvolutionConfig:
    raw = await gw.pool.fetchval(
        "SELECT config FROM evolution_config WHERE agent_id = $1", agent_id
    )
    return EvolutionConfig.model_validate(raw) if raw is not None else EvolutionConfig()


@route(router, "GET", PREFIX + "/config")
async def get_config(agent_id: str, gw: GW) -> dict[str, Any]:
    await gw.agent_row(agent_id)
    return (await _config(gw, agent_id)).model_dump(mode="json")


@route(router, "PUT", PREFIX + "/config")
async def put_config(agent_id: str, body: EvolutionConfig, gw: GW) -> dict[str, Any]:
    await _command(gw, ConfigureEvolution(agent_id=agent_id, config=body), agent_id, 15.0)
    return (await _config(gw, agent_id)).model_dump(mode="json")


def _proposal_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "agent_id": row["agent_id"],
        "source": row["source"],
        "status": row["status"],
        "parent_version": row["parent_version"],
        "candidate_version": row["candidate_version"],
        "patch": row["patch"],
        "rationale": row["rationale"],
        "reason": row["reason"],
        "report": row["report"],
        "tokens": row["tokens"],
        "created_at": row["created_at"].isoformat(),
        "updated_at": row["updated_at"].isoformat(),
    }


async def _proposal(gw: Gateway, agent_id: str, proposal_id: str) -> dict[str, Any]:
    row = await gw.pool.fetchrow(
        "SELECT * FROM evolution_proposals WHERE id = $1 AND agent_id = $2", proposal_id, agent_id
    )
    if row is None:
        raise HTTPException(404, f"proposal {proposal_id} not found")
    out = _proposal_json(dict(row))
    cases = await gw.pool.fetch(
        "SELECT n, body FROM evolution_cases WHERE proposal_id = $1 ORDER BY n", proposal_id
    )
    out["cases"] = [dict(c["body"]) | {"n": c["n"]} for c in cases]
    specs = {
        r["version_id"]: VersionSpec.model_validate(r["spec"])
        for r in await gw.pool.fetch(
            "SELECT version_id, spec FROM agent_versions WHERE agent_id = $1"
            " AND version_id = ANY($2)",
            agent_id,
            [row["parent_version"], row["candidate_version"]],
        )
    }
    parent, child = specs.get(row["parent_version"]), specs.get(row["candidate_version"])
    out["diff"] = (
        [d.model_dump(mode="json") for d in diff(parent, child)] if parent and child else []
    )
    return out


@route(router, "POST", PREFIX + "/proposals", status_code=201)
async def propose(
    agent_id: str, body: ProposeBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    """With an `Idempotency-Key`, a retry is the same proposal: its id and its command's
    derive from the key, so the one the first try made is answered (and evaluated once)."""
    key = checked_key(idempotency_key)
    proposal_id = resource_id("proposal", key, agent_id)
    if key is not None:
        found = await gw.pool.fetchrow(
            "SELECT status, reason FROM evolution_proposals WHERE id = $1 AND agent_id = $2",
            proposal_id,
            agent_id,
        )
        if found is not None and found["status"] == "refused":
            # (a retry, answered as the first try was)
            raise HTTPException(422, f"proposal refused: {found['reason']}")
        if found is not None:
            return await _proposal(gw, agent_id, proposal_id)  # (a retry)
    command = ProposeChange(agent_id=agent_id, proposal_id=proposal_id, patch=body.patch)
    command_id = derived_id("cmd", proposal_id, "propose") if key is not None else None
    # (The agent's model may be asked to draft it.)
    await _command(gw, command, agent_id, 120.0, command_id)
    return await _proposal(gw, agent_id, proposal_id)


@route(router, "GET", PREFIX + "/proposals")
async def list_proposals(agent_id: str, gw: GW) -> list[dict[str, Any]]:
    await gw.agent_row(agent_id)
    rows = await gw.pool.fetch(
        "SELECT * FROM evolution_proposals WHERE agent_id = $1 ORDER BY created_at, id", agent_id
    )
    return [_proposal_json(dict(r)) for r in rows]


@route(router, "GET", PREFIX + "/proposals/{proposal_id}")
async def get_proposal(agent_id: str, proposal_id: str, gw: GW) -> dict[str, Any]:
    await gw.agent_row(agent_id)
    return await _proposal(gw, agent_id, proposal_id)


async def _acted(
    gw: Gateway, agent_id: str, proposal_id: str, command: Command, timeout: float
) -> dict[str, Any]:
    """Send a command about one proposal; the proposal as it then stands."""
    await _command(gw, command, agent_id, timeout)
    return await _proposal(gw, agent_id, proposal_id)


@route(router, "POST", PREFIX + "/proposals/{proposal_id}/evaluate", status_code=202)
async def evaluate(agent_id: str, proposal_id: str, gw: GW) -> dict[str, Any]:
    """Start (or resume) the shadow evaluation and answer at once; the proposal's status
    says when it is decided (GET the proposal: `evaluating`, then accepted or rejected).
    The command's id is the one the service itself uses after a proposal, so an
    evaluation already started is not started twice."""
    current = await _proposal(gw, agent_id, proposal_id)
    if current["status"] not in ("proposed", "evaluating"):
        return current
    config = await _config(gw, agent_id)
    if config.mode == "propose_only":
        raise HTTPException(
            409, f"agent {agent_id} evolves in mode propose_only: nothing is evaluated"
        )
    command = EvaluateProposal(agent_id=agent_id, proposal_id=proposal_id)
    envelope = Envelope.wrap(
        command,
        aggregate_id=agent_id,
        producer=PRODUCER,
        id=derived_id("cmd", proposal_id, "evaluate")
        if current["status"] == "proposed"
        else new_id("cmd"),  # (resuming: a new command, deduplicated by the cases)
    )
    await gw.eventlog.send_command(subjects.evolution_command_subject(agent_id), envelope)
    return current


def _review(agent_id: str, proposal_id: str, approve: bool, body: ReviewBody) -> ReviewProposal:
    return ReviewProposal(
        agent_id=agent_id, proposal_id=proposal_id, approve=approve, note=body.note
    )


@route(router, "POST", PREFIX + "/proposals/{proposal_id}/approve")
async def approve(agent_id: str, proposal_id: str, body: ReviewBody, gw: GW) -> dict[str, Any]:
    command = _review(agent_id, proposal_id, True, body)
    return await _acted(gw, agent_id, proposal_id, command, COMMAND_TIMEOUT)


@route(router, "POST", PREFIX + "/proposals/{proposal_id}/reject")
async def reject(agent_id: str, proposal_id: str, body: ReviewBody, gw: GW) -> dict[str, Any]:
    command = _review(agent_id, proposal_id, False, body)
    return await _acted(gw, agent_id, proposal_id, command, COMMAND_TIMEOUT)


@route(router, "POST", PREFIX + "/proposals/{proposal_id}/promote")
async def promote(agent_id: str, proposal_id: str, gw: GW) -> dict[str, Any]:
    command = PromoteProposal(agent_id=agent_id, proposal_id=proposal_id)
    return await _acted(gw, agent_id, proposal_id, command, COMMAND_TIMEOUT)


@route(router, "POST", PREFIX + "/proposals/{proposal_id}/rollout")
async def rollout(agent_id: str, proposal_id: str, gw: GW) -> dict[str, Any]:
    """Start a canary of an accepted (by default: approved) proposal."""
    command = StartRollout(agent_id=agent_id, proposal_id=proposal_id)
    reply = await _command(gw, command, agent_id, COMMAND_TIMEOUT)
    return await _rollout(gw, agent_id, str((reply.result or {})["rollout_id"]))


@route(router, "POST", PREFIX + "/abort")
async def abort(agent_id: str, body: AbortBody, gw: GW) -> dict[str, Any]:
    """End the running canary: every conversation is back on the stable agent."""
    command = AbortRollout(agent_id=agent_id, reason=body.reason)
    reply = await _command(gw, command, agent_id, COMMAND_TIMEOUT)
    return await _rollout(gw, agent_id, str((reply.result or {})["rollout_id"]))


async def _rollout(gw: Gateway, agent_id: str, rollout_id: str) -> dict[str, Any]:
    row = await gw.pool.fetchrow(
        "SELECT * FROM evolution_rollouts WHERE rollout_id = $1 AND agent_id = $2",
        rollout_id,
        agent_id,
    )
    if row is None:
        raise HTTPException(404, f"rollout {rollout_id} not found")
    decisions = await gw.pool.fetch(
        "SELECT seq, type, payload, created_at FROM evolution_history WHERE agent_id = $1"
        " AND payload->>'rollout_id' = $2 ORDER BY seq",
        agent_id,
        rollout_id,
    )
    arms = await gw.pool.fetch(_ARMS, rollout_id, row["weight"])
    return {
        "rollout_id": row["rollout_id"],
        "proposal_id": row["proposal_id"],
        "version_id": row["version_id"],
        "stable_version": row["stable_version"],
        "status": row["status"],
        "weight": row["weight"],
        "steps": list(row["steps"]),
        "reason": row["reason"],
        "started_at": row["started_at"].isoformat(),
        "updated_at": row["updated_at"].isoformat(),
        # The finished runs of the current step, per arm: what the next analysis counts.
        "current_step": {
            a["rollout_arm"]: {"runs": a["runs"], "failed": a["failed"]} for a in arms
        },
        # Every decision of the canary, in order: its weight over time.
        "decisions": [
            {
                "seq": d["seq"],
                "type": d["type"],
                "weight": d["payload"].get("weight"),
                "reason": d["payload"].get("reason"),
                "stable": d["payload"].get("stable"),
                "candidate": d["payload"].get("candidate"),
                "created_at": d["created_at"].isoformat(),
            }
            for d in decisions
        ],
    }


@route(router, "GET", PREFIX + "/rollouts")
async def list_rollouts(agent_id: str, gw: GW) -> list[dict[str, Any]]:
    await gw.agent_row(agent_id)
    ids = await gw.pool.fetch(
        "SELECT rollout_id FROM evolution_rollouts WHERE agent_id = $1 ORDER BY started_at",
        agent_id,
    )
    return [await _rollout(gw, agent_id, r["rollout_id"]) for r in ids]


@route(router, "GET", PREFIX + "/rollouts/{rollout_id}")
async def get_rollout(agent_id: str, rollout_id: str, gw: GW) -> dict[str, Any]:
    await gw.agent_row(agent_id)
    return await _rollout(gw, agent_id, rollout_id)


@route(router, "POST", PREFIX + "/rollback")
async def rollback(
    agent_id: str, body: RollbackBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    """With an `Idempotency-Key`, a retry is the same command (its id derives from the
    key), answered from its record: one rollback, however often sent."""
    key = checked_key(idempotency_key)
    command = RollBackVersion(agent_id=agent_id, version_id=body.version_id, reason=body.reason)
    command_id = derived_id("cmd", agent_id, key, "rollback") if key is not None else None
    await _command(gw, command, agent_id, COMMAND_TIMEOUT, command_id)
    return {"version_id": body.version_id}


@route(router, "GET", PREFIX + "/versions")
async def list_versions(agent_id: str, gw: GW) -> dict[str, Any]:
    await gw.agent_row(agent_id)
    serving = await gw.pool.fetchval(
        "SELECT version_id FROM evolution_serving WHERE agent_id = $1", agent_id
    )
    rows = await gw.pool.fetch(
        "SELECT version_id, parent_id, spec, patch, rationale, run_ids, created_at"
        " FROM agent_versions WHERE agent_id = $1 ORDER BY created_at, version_id",
        agent_id,
    )
    return {
        "serving": serving,
        "versions": [
            {
                "version_id": r["version_id"],
                "parent_id": r["parent_id"],
                "spec": r["spec"],
                "patch": r["patch"],
                "rationale": r["rationale"],
                "run_ids": list(r["run_ids"]),
                "created_at": r["created_at"].isoformat(),
            }
            for r in rows
        ],
    }


@route(router, "GET", PREFIX + "/history")
async def history(agent_id: str, gw: GW) -> list[dict[str, Any]]:
    await gw.agent_row(agent_id)
    rows = await gw.pool.fetch(
        "SELECT seq, type, prev_hash, hash, payload, created_at FROM evolution_history"
        " WHERE agent_id = $1 ORDER BY seq",
        agent_id,
    )
    return [
        {
            "seq": r["seq"],
            "type": r["type"],
            "prev_hash": r["prev_hash"],
            "hash": r["hash"],
            "decision": r["payload"],
            "created_at": r["created_at"].isoformat(),
        }
        for r in rows
    ]


@route(router, "GET", PREFIX + "/verify")
async def verify_history(agent_id: str, gw: GW) -> dict[str, Any]:
    """Check the chain on the log itself (not the projection): the first broken link."""
    await gw.agent_row(agent_id)
    links: list[Link] = []
    async for raw in gw.eventlog.replay(subjects.evolution_subject(agent_id)):
        try:
            event = decode(raw.data).data
        except MalformedMessage as exc:
            return {
                "ok": False,
                "links": len(links),
                "broken": {"seq": raw.seq, "reason": str(exc)},
            }
        if not isinstance(event, EvolutionDecided):
            continue
        links.append(
            Link(raw.seq, event.prev_hash, event.hash, event.chain_payload(), event.type_name())
        )
    broken = verify(links)
    if broken is None:
        # The last hash: compared with a copy kept elsewhere, it shows decisions removed
        # from the chain's end (which break no link).
        last = links[-1].hash if links else None
        return {"ok": True, "links": len(links), "broken": None, "last_hash": last}
    return {
        "ok": False,
        "links": len(links),
        "broken": {"seq": broken.seq, "type": broken.type, "reason": broken.reason},
    }
