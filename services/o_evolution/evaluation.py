"""A proposal evaluated in the shadow (issue 14 points 3 and 4): the agent's recent runs
replayed under parent and candidate, each pair judged in both orders, the cases gated.

Each case is recorded (CaseEvaluated) as soon as it is judged: an evaluation resumed
after a crash starts at the next case. The gate decides after every case (its SPRT stops
as soon as the evidence allows) and its decision is recorded (CandidateEvaluated).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from o_contracts.base import Reply
from o_contracts.envelope import Envelope
from o_contracts.events import CandidateEvaluated, CaseEvaluated, EvaluationStarted
from o_contracts.evolution import EvolutionConfig, VersionSpec
from o_contracts.evolution_commands import EvaluateProposal, StartRollout
from o_contracts.experiments import CaseResult, GateReport, GateSettings
from o_contracts.ids import derived_id
from o_evolution import gate, judge
from o_evolution.checkpoints import Checkpoints
from o_evolution.commands import EvolutionCommands, canary_follows
from o_evolution.feedback import rated_steps_of, run_feedback
from o_evolution.live_first import Sampler, executor_load, wait_for_turn
from o_evolution.shadow_cases import (
    MeteredModel,
    TokenLimitExceeded,
    live_model,
    over_limit,
    run_arm,
)
from o_evolution.waiting_line import WaitingLine
from o_executor.shadow.runner import RecordedRun, read_run
from o_executor.shadow.snapshot import Snapshot, Snapshots, take_snapshot
from o_runtime.commands import Deferred, Delivery
from o_runtime.eventlog import AppendRejected

# When the proposal's evaluation began (its experiment time limit counts from there).
# How long an evaluation waits in the stream while the shadow's slots are taken.
BUSY_DELAY = 2.0

_STARTED = (
    "SELECT created_at FROM evolution_history WHERE agent_id = $1"
    " AND type = 'EvaluationStarted' AND payload->>'proposal_id' = $2"
)
# The agent's own finished runs (not its background ones: sleep-time and the like).
_RUNS = (
    f"SELECT id, conversation_id, last_seq, started_seq, {rated_steps_of('runs')} AS feedback"
    " FROM runs WHERE agent_id = $1"
    " AND status = 'completed' AND NOT background AND started_seq IS NOT NULL"
)


def conversation_text(recorded: RecordedRun) -> str:
    lines = [f"{m.role}: {m.content}" for m in recorded.command.data.messages if m.content]
    return "\n".join(lines)


@dataclass
class Evaluation:
    commands: EvolutionCommands

    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _running: asyncio.Semaphore | None = None
    # Handlers waiting for a shadow slot (at most one: evaluate says why).
    _next_in_line: int = 0
    # The evaluations waiting in the stream, so the oldest goes next.
    _line: WaitingLine = field(default_factory=lambda: WaitingLine(forget_after=4 * BUSY_DELAY))
    # How busy users keep the executor (live_first.py); a test may sample otherwise.
    live_load: Sampler | None = None
    # Each agent's folds as of its last evaluation's first case, for its next evaluation
    # to read on from (in memory and in Postgres: checkpoints.py).
    checkpoints: Checkpoints | None = None

    def __post_init__(self) -> None:
        if self.live_load is None:
            self.live_load = executor_load(self.commands.s.eventlog)
        if self.checkpoints is None:
            self.checkpoints = Checkpoints(self.commands.s.pool, self.commands.s.eventlog)

    async def evaluate(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: EvaluateProposal = env.data
        # One evaluation of a proposal at a time in this process (the command is
        # deduplicated across replicas by its id; a second one resumes from the cases),
        # and at most shadow_concurrency evaluations at all: shadow work is background.
        lock = self._locks.setdefault(cmd.proposal_id, asyncio.Lock())
        slots = self._slots()
        if lock.locked():
            raise Deferred(BUSY_DELAY)
        # The oldest waiting evaluation goes next (waiting_line.py), even to a free slot:
        # it is back within BUSY_DELAY.
        older = self._line.older_waits(delivery.stream_seq, time.monotonic())
        if older or (slots.locked() and self._next_in_line > 0):
            # Waiting here holds one of the command consumer's few handlers for as long as
            # the evaluations ahead run (minutes): with every handler so taken, the agents'
            # other evolution commands (a proposal, a rollback, an agent's own evolution
            # tool mid-run) would queue behind them. One evaluation waits here, the next to
            # start; the others wait in the stream.
            raise Deferred(BUSY_DELAY)
        self._line.leave(delivery.stream_seq)
        async with lock:
            self._next_in_line += 1
            try:
                await slots.acquire()  # (at once, unless this is the one next in line)
            finally:
                self._next_in_line -= 1
            try:
                return await self._evaluate(env, cmd)
            finally:
                slots.release()
                self._locks.pop(cmd.proposal_id, None)

    def _slots(self) -> asyncio.Semaphore:
        if self._running is None:
            self._running = asyncio.Semaphore(self.commands.settings.shadow_concurrency)
        return self._running

    async def _evaluate(self, env: Envelope[Any], cmd: EvaluateProposal) -> Reply:
        s = self.commands.s
        row = await self.commands.proposal(cmd.agent_id, cmd.proposal_id)
        if row["status"] not in ("proposed", "evaluating"):
            return Reply(ok=True, result={"proposal_id": cmd.proposal_id, "status": row["status"]})
        config = await self.commands.config(cmd.agent_id)
        if config.mode == "propose_only":
            raise AppendRejected(
                f"agent {cmd.agent_id} evolves in mode propose_only: nothing is evaluated", 409
            )
        if row["status"] == "proposed":
            busy = await s.pool.fetchval(
                "SELECT id FROM evolution_proposals WHERE agent_id = $1 AND id <> $2"
                " AND status = 'evaluating'",
                cmd.agent_id,
                cmd.proposal_id,
            )
            if busy is not None:
                raise AppendRejected(
                    f"proposal {busy} is being evaluated: one experiment at a time", 409
                )
            await self.commands.record(
                env,
                EvaluationStarted(agent_id=cmd.agent_id, proposal_id=cmd.proposal_id),
                "evaluation-started",
            )
        parent = VersionSpec.model_validate(
            await self.commands._spec(cmd.agent_id, row["parent_version"])
        )
        candidate = VersionSpec.model_validate(
            await self.commands._spec(cmd.agent_id, row["candidate_version"])
        )
        refs = gate.select_cases(
            [
                gate.CaseRef(
                    r["id"],
                    r["conversation_id"],
                    r["last_seq"],
                    started_seq=r["started_seq"],
                    feedback=run_feedback(r["feedback"]),
                )
                for r in await s.pool.fetch(_RUNS, cmd.agent_id)
            ],
            config.cases_per_evaluation,
            config.max_votes_per_conversation,
        )
        done = [
            CaseResult.model_validate(r["body"])
            for r in await s.pool.fetch(
                "SELECT body FROM evolution_cases WHERE proposal_id = $1 ORDER BY n",
                cmd.proposal_id,
            )
        ]
        settings = _gate_settings(config)
        report = gate.decide(done, settings, final=len(done) >= len(refs))
        n = len(done)
        started = await s.pool.fetchval(_STARTED, cmd.agent_id, cmd.proposal_id)
        # Every case's snapshot (the agent just before the run started), taken with the
        # first case in one pass over the agent's subjects (Snapshots.many).
        snapshots: dict[str, Snapshot] = {}
        while report.decision == "continue":
            await self.commands.within_budget(env, cmd.agent_id, config)
            elapsed = (datetime.now(UTC) - started).total_seconds() if started else 0.0
            if elapsed > config.shadow_experiment_seconds:
                report = timed_out(done, settings, config.shadow_experiment_seconds)
                break
            assert self.live_load is not None
            await wait_for_turn(self.commands.settings.shadow_yield, self.live_load)
            ref = refs[n]
            working = time.process_time()
            if not snapshots:
                wanted = [(r.started_seq - 1, r.conversation_id) for r in refs[n:]]
                taken = await self._snapshots(cmd.agent_id, wanted)
                snapshots = {
                    r.run_id: snapshot for r, snapshot in zip(refs[n:], taken, strict=True)
                }
            snapshot = snapshots[ref.run_id]
            case, tokens = await self._case(cmd.agent_id, ref, parent, candidate, config, snapshot)
            await self._rest(time.process_time() - working)
            await self.commands.record(
                env,
                CaseEvaluated(
                    agent_id=cmd.agent_id,
                    proposal_id=cmd.proposal_id,
                    n=n,
                    case=case,
                    tokens=tokens,
                ),
                f"case-{n}",
            )
            done.append(case)
            n += 1
            report = gate.decide(done, settings, final=n >= len(refs))
        seq = await self.commands.record(
            env,
            CandidateEvaluated(agent_id=cmd.agent_id, proposal_id=cmd.proposal_id, report=report),
            "evaluated",
        )
        if report.decision == "accepted" and canary_follows(config, approved=False):
            await self.commands.next_stage(
                env,
                StartRollout(agent_id=cmd.agent_id, proposal_id=cmd.proposal_id),
                derived_id("cmd", cmd.proposal_id, "rollout"),
            )
        return Reply(
            ok=True,
            seq=seq,
            result={"proposal_id": cmd.proposal_id, "status": report.decision},
        )

    async def _snapshots(
        self, agent_id: str, wanted: list[tuple[int, str | None]]
    ) -> list[Snapshot]:
        """The cases' snapshots (Snapshots.many), read on from the agent's last evaluation's
        first case where none of these is before it; this one's first case's folds kept for
        the next (whose cases, the agent's latest runs then, begin here or later)."""
        assert self.checkpoints is not None
        first = min(wanted, key=lambda w: w[0])
        kept = await self.checkpoints.latest(agent_id)
        start = kept if kept is not None and kept.seq <= first[0] else None
        snapshots = Snapshots(self.commands.s.eventlog, start)
        await snapshots.at(agent_id, *first)
        await self.checkpoints.keep(agent_id, await snapshots.checkpoint(first[0]))
        return await snapshots.many(agent_id, wanted)

    async def _rest(self, worked: float) -> None:
        """Keep shadow work to its duty cycle (O_SHADOW_DUTY): rest in proportion to the
        CPU time the case took (waiting on a remote model costs no rest)."""
        duty = self.commands.settings.shadow_duty
        if duty < 1.0:
            await asyncio.sleep(worked * (1 - duty) / duty)

    async def _case(
        self,
        agent_id: str,
        ref: gate.CaseRef,
        parent: VersionSpec,
        candidate: VersionSpec,
        config: EvolutionConfig,
        snapshot: Snapshot,
    ) -> tuple[CaseResult, int]:
        """The case judged, within its shadow instance's limits (wall time, tokens, the
        worker's memory)."""
        model = MeteredModel(live_model(self.commands.settings.retries), config.shadow_case_tokens)
        limit = self.commands.settings.shadow_max_rss_mb
        if limit and (rss := resident_mb()) is not None and rss > limit:
            reason = f"the shadow worker uses {rss:.0f} MB, over its limit of {limit} MB"
            return over_limit(ref.run_id, ref.conversation_id, reason), 0
        try:
            async with asyncio.timeout(config.shadow_case_seconds):
                return await self._judged(agent_id, ref, parent, candidate, model, snapshot)
        except TimeoutError:
            reason = f"the case exceeded its wall-time limit of {config.shadow_case_seconds:g} s"
        except TokenLimitExceeded as exc:
            reason = str(exc)
        return over_limit(ref.run_id, ref.conversation_id, reason), model.spent

    async def _judged(
        self,
        agent_id: str,
        ref: gate.CaseRef,
        parent: VersionSpec,
        candidate: VersionSpec,
        model: MeteredModel,
        snapshot: Snapshot,
    ) -> tuple[CaseResult, int]:
        eventlog = self.commands.s.eventlog
        retries = self.commands.settings.retries
        recorded = await read_run(
            eventlog, agent_id, ref.run_id, ref.conversation_id, since=ref.started_seq
        )
        if snapshot.seq != recorded.started_seq - 1:
            # (The runs projection's started_seq is where the run's RunStarted is: never
            # so far, but the log has the last word.)
            snapshot = await take_snapshot(
                eventlog, agent_id, recorded.started_seq - 1, ref.conversation_id
            )
        old = await run_arm(snapshot, recorded, parent, model)
        new = await run_arm(snapshot, recorded, candidate, model)
        tokens = old.result.tokens + new.result.tokens
        first = second = None
        if old.result.inconclusive is None and new.result.inconclusive is None:
            text = conversation_text(recorded)
            judge_model = self.commands.settings.judge_model
            a = await judge.judge(judge_model, text, old.result.answer, new.result.answer, retries)
            b = await judge.judge(judge_model, text, new.result.answer, old.result.answer, retries)
            first, second = a.preference, b.preference
            tokens += a.usage.total_tokens + b.usage.total_tokens
        case = gate.case_result(
            ref.run_id,
            old.result,
            new.result,
            first,
            second,
            conversation_id=ref.conversation_id,
            feedback=ref.feedback,
        )
        return case, tokens


def resident_mb() -> float | None:
    """This process's resident memory in MB (Linux /proc); None where it cannot be read."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def timed_out(done: list[CaseResult], settings: GateSettings, limit: float) -> GateReport:
    """An evaluation past its time limit: what the gate says of its cases as final (an
    undecided one is rejected as inconclusive), saying why it stopped."""
    report = gate.decide(done, settings, final=True)
    return report.model_copy(
        update={"reason": f"stopped at the experiment's time limit of {limit:g} s: {report.reason}"}
    )


def _gate_settings(config: EvolutionConfig) -> GateSettings:
    return GateSettings(max_cases=config.cases_per_evaluation)
