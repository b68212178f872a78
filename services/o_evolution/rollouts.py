"""Canary rollouts of an accepted proposal (issue 14 point 5), on live traffic.

A rollout starts at its first step's weight (RolloutStarted); the executor reads it with
the agent and routes each conversation to an arm (o_executor/run/versions.py), and
records the arm in RunStarted. Here the end of every candidate run is reviewed against
the step's finished runs (o_evolution/canary.py): the failure limit aborts at once, and
every `analysis_every` candidate runs the two arms are compared. A passed analysis moves
to the next step (RolloutAdvanced), or at full traffic ends the canary (RolloutCompleted)
and promotes the candidate unless a person must approve the promotion first. An abort
(RolloutAborted) takes every conversation back to the stable agent on its next run.

Each decision is made on the evolution projection as the log has it at the subject's
last decision, with an id derived from the rollout and its weight, so run ends reviewed
twice (redelivery, two replicas) decide once.
"""

from __future__ import annotations

import logging
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from o_contracts.base import Reply
from o_contracts.envelope import Envelope
from o_contracts.events import (
    RolloutAborted,
    RolloutAdvanced,
    RolloutCompleted,
    RolloutStarted,
    RunCompleted,
)
from o_contracts.events.evolution import EvolutionDecided
from o_contracts.evolution import EvolutionConfig
from o_contracts.evolution_commands import AbortRollout, PromoteProposal, StartRollout
from o_contracts.ids import derived_id
from o_contracts.projection_names import RUNS
from o_evolution import history
from o_evolution.canary import (
    CanaryLimits,
    FinishedRun,
    analyse,
    arm_stats,
    next_weight,
    review,
)
from o_evolution.canary_judge import Sampled, sampled_judgement
from o_evolution.checkpoints import Checkpoints
from o_evolution.commands import EvolutionCommands
from o_evolution.feedback import negative_steps_of
from o_evolution.patches import PatchRefused
from o_evolution.rebase import made_on
from o_executor.shadow.snapshot import KeptSnapshots
from o_runtime.commands import Delivery
from o_runtime.eventlog import AppendRejected, Recorded

log = logging.getLogger(__name__)

# The step's finished runs as of one run's end (the ones the log had ended by then), in
# the order they ended; max steps counts as a failure, as a run that gave no answer.
_STEP_RUNS = (
    "SELECT r.id, r.conversation_id, coalesce(r.started_seq, 1) AS started_seq, r.rollout_arm,"
    " r.status = 'failed' OR r.stop_reason = 'max_steps' AS failed,"
    " coalesce(r.step_count, 0) AS steps,"
    " coalesce((r.usage->>'total_tokens')::bigint, 0) AS tokens,"
    " (SELECT count(*) FROM messages m WHERE m.run_id = r.id AND m.role = 'tool'"
    "  AND m.body->>'status' = 'error') AS tool_errors,"
    f" {negative_steps_of('r')} > 0 AS rated_negative"
    " FROM runs r WHERE r.rollout_id = $1 AND r.rollout_weight = $2"
    " AND r.status IN ('completed', 'failed') AND r.last_seq <= $3 ORDER BY r.last_seq"
)


def rollout_id(proposal_id: str) -> str:
    """One canary per proposal: an aborted one is not tried again."""
    return derived_id("rollout", proposal_id)


def limits(config: EvolutionConfig) -> CanaryLimits:
    # Fewer runs than an interval never advance a step (too little traffic pauses).
    return CanaryLimits(failure_limit=config.failure_limit, min_runs=config.analysis_every)


def promotion_waits(config: EvolutionConfig) -> bool:
    """Whether a canary that passed waits for a person's promote (never in mode auto)."""
    return config.approval_before_promotion and config.mode != "auto"


@dataclass
class Rollouts:
    commands: EvolutionCommands
    # Each canary's agent's snapshots, kept from one analysis to the next: a step's samples
    # are its latest runs, so each analysis reads on from where the last one left off.
    kept: KeptSnapshots = field(default_factory=KeptSnapshots)
    # A canary's first analysis in a process starts from the agent's last evaluation's
    # checkpoint (its samples, runs since the canary began, come after it).
    checkpoints: Checkpoints | None = None

    # -- commands ---------------------------------------------------------------

    async def start(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: StartRollout = env.data
        c = self.commands
        row = await c.proposal(cmd.agent_id, cmd.proposal_id)
        config = await c.config(cmd.agent_id)
        rid = rollout_id(cmd.proposal_id)
        if row["status"] in ("canary", "awaiting_promotion", "aborted"):
            return _rollout_reply(await self._row(rid), 0)
        needs_approval = config.approval_before_canary and config.mode != "auto"
        ready = {"approved"} if needs_approval else {"approved", "accepted"}
        if row["status"] not in ready:
            raise AppendRejected(
                f"proposal {cmd.proposal_id} is {row['status']}: a canary needs "
                + ("a reviewer's approval" if needs_approval else "the gate's acceptance"),
                409,
            )
        live = await c.live_canary(cmd.agent_id)
        if live is not None and live["rollout_id"] != rid:
            raise AppendRejected(
                f"agent {cmd.agent_id} already has a canary ({live['proposal_id']}):"
                " one experiment at a time",
                409,
            )
        change = await c.change_of(row)
        try:
            # The candidate's change on the agent as it is now (o_evolution/rebase.py).
            now = (await c.agent(cmd.agent_id)).spec(config)
            spec = made_on(now, change)
        except PatchRefused as exc:
            raise AppendRejected(
                f"the change cannot be made on the agent: {exc.reason}", 409
            ) from None
        stable = await c._serving(cmd.agent_id, config)
        seq = await c.record(
            env,
            RolloutStarted(
                agent_id=cmd.agent_id,
                proposal_id=cmd.proposal_id,
                rollout_id=rid,
                version_id=spec.version_id,
                spec=spec,
                stable_version=stable,
                weight=float(config.canary_steps[0]),
                steps=list(config.canary_steps),
            ),
            "rollout",
        )
        return _rollout_reply(await self._row(rid), seq)

    async def abort(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: AbortRollout = env.data
        live = await self.commands.live_canary(cmd.agent_id)
        if live is None:
            known = await self.commands.s.pool.fetchrow(
                "SELECT * FROM evolution_rollouts WHERE agent_id = $1"
                " ORDER BY updated_at DESC LIMIT 1",
                cmd.agent_id,
            )
            if known is not None and known["status"] == "aborted":  # (delivered again)
                return _rollout_reply(known, 0)
            raise AppendRejected(f"agent {cmd.agent_id} has no canary running", 409)
        seq = await self.commands.end_canary(env, live, cmd.reason, "operator")
        return _rollout_reply(await self._row(live["rollout_id"]), seq)

    async def _row(self, rid: str) -> asyncpg.Record:
        row = await self.commands.s.pool.fetchrow(
            "SELECT * FROM evolution_rollouts WHERE rollout_id = $1", rid
        )
        assert row is not None
        return row

    # -- the analysis -------------------------------------------------------------

    async def on_runs_completed(self, records: list[Recorded], running: AbstractSet[str]) -> None:
        """The ends of runs, in log order: a canary's candidate runs are reviewed (`running`:
        the agents with a canary running, run_ends.py)."""
        for rec in records:
            if rec.envelope.data.agent_id in running:  # type: ignore[attr-defined]
                await self.on_run_completed(rec)

    async def on_run_completed(self, rec: Recorded) -> None:
        ended = rec.envelope.data
        assert isinstance(ended, RunCompleted)
        s = self.commands.s
        async with s.reads.at(rec.seq, RUNS) as conn:
            run = await conn.fetchrow(
                "SELECT rollout_id, rollout_arm, rollout_weight FROM runs WHERE id = $1",
                ended.run_id,
            )
            if run is None or run["rollout_arm"] != "candidate":
                return
            rows = await conn.fetch(_STEP_RUNS, run["rollout_id"], run["rollout_weight"], rec.seq)
        config = await self.commands.config(ended.agent_id)
        runs = [_finished(r) for r in rows]
        verdict = review(runs, config.analysis_every, limits(config))
        if verdict is None or verdict.action == "pause":
            return
        rid, weight = str(run["rollout_id"]), float(run["rollout_weight"])
        stable, candidate = arm_stats(runs, "stable"), arm_stats(runs, "candidate")
        if verdict.action != "abort" and config.canary_judge_samples:
            # The measured rates passed: the judge has its say on a sample too.
            judged = await self._judge_sample(ended.agent_id, rows, config)
            candidate = candidate.model_copy(
                update={"judge_wins": judged.wins, "judge_losses": judged.losses}
            )
            verdict = analyse(stable, candidate, limits(config))
        log.info("canary %s at %s%%: %s (%s)", rid, weight, verdict.action, verdict.reason)

        async def decide(conn: asyncpg.Connection) -> EvolutionDecided | None:
            live = await conn.fetchrow(
                "SELECT * FROM evolution_rollouts WHERE rollout_id = $1", rid
            )
            # Decided already (or by someone else: an abort, a promotion).
            if live is None or live["status"] != "running" or live["weight"] != weight:
                return None
            base: dict[str, Any] = {
                "agent_id": ended.agent_id,
                "proposal_id": live["proposal_id"],
                "rollout_id": rid,
            }
            if verdict.action == "abort":
                return RolloutAborted(
                    **base,
                    weight=weight,
                    reason=verdict.reason,
                    by="analysis",
                    stable=stable,
                    candidate=candidate,
                )
            step = next_weight(list(live["steps"]), weight)
            if step is None:
                return RolloutCompleted(
                    **base, stable=stable, candidate=candidate, reason=verdict.reason
                )
            return RolloutAdvanced(
                **base,
                weight=step,
                previous_weight=weight,
                stable=stable,
                candidate=candidate,
                reason=verdict.reason,
            )

        await history.record_if(
            s.eventlog,
            s.watcher,
            s.reads,
            rec.envelope,
            ended.agent_id,
            decide,
            derived_id("evt", rid, str(weight), "analysed"),
        )
        await self._after(rec.envelope, rid, config)

    async def _judge_sample(
        self, agent_id: str, rows: list[asyncpg.Record], config: EvolutionConfig
    ) -> Sampled:
        """The step's latest candidate runs, judged against the stable agent's answers (the
        agent as it is: its memory tools may have edited an evolvable block since the canary
        began, so the version recorded then may hold an older text, or be none on record)."""
        stable = (await self.commands.agent(agent_id)).spec(config)
        picked = [
            (str(r["id"]), r["conversation_id"], int(r["started_seq"]))
            for r in rows
            if r["rollout_arm"] == "candidate" and not r["failed"]
        ][-config.canary_judge_samples :]
        s = self.commands.s
        start = await self.checkpoints.latest(agent_id) if self.checkpoints else None
        snapshots = self.kept.of(s.eventlog, agent_id, start)
        return await sampled_judgement(
            s.eventlog, self.commands.settings, agent_id, picked, stable, snapshots
        )

    async def _after(self, cause: Envelope[Any], rid: str, config: EvolutionConfig) -> None:
        """A canary that passed at full traffic is promoted, unless a person must; one the
        analysis aborted makes way for the next proposal waiting for a canary."""
        row = await self._row(rid)
        if row["status"] == "aborted":
            await self.commands.start_next_canary(cause, row["agent_id"], rid)
            return
        if row["status"] != "completed" or promotion_waits(config):
            return
        await self.commands.next_stage(
            cause,
            PromoteProposal(agent_id=row["agent_id"], proposal_id=row["proposal_id"]),
            derived_id("cmd", rid, "promote"),
        )


def _finished(row: asyncpg.Record) -> FinishedRun:
    return FinishedRun(
        arm=row["rollout_arm"],
        failed=bool(row["failed"]),
        tool_errors=int(row["tool_errors"]),
        negative_feedback=int(bool(row["rated_negative"])),
        steps=int(row["steps"]),
        tokens=int(row["tokens"]),
    )


def _rollout_reply(row: asyncpg.Record, seq: int) -> Reply:
    return Reply(
        ok=True,
        result={
            "rollout_id": row["rollout_id"],
            "status": row["status"],
            "weight": row["weight"],
            "decision_seq": seq,
        },
    )
