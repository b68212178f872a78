"""Canary rollout of an evolved agent: which arm a conversation takes, and whether to go on.

Pure functions, no I/O. A promoted candidate does not replace the stable agent
at once: it takes a growing share of conversations (the weight, in steps such
as 5, 25, 50, 100 percent), and between steps the two arms' measures are
compared, in the manner of Argo Rollouts' and Flagger's analysis runs.

The split hashes (agent, conversation, rollout) with sha256 into a bucket
0..9999 rather than drawing at random: any process decides the same arm for a
conversation without sharing state, a conversation keeps its arm while the
weight rises (its bucket stays below the larger threshold), and a new rollout
reshuffles which conversations go first.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from o_contracts.experiments import ArmStats

BUCKETS = 10_000

Arm = Literal["candidate", "stable"]
__all__ = ["ArmStats", "CanaryLimits", "CanaryVerdict", "analyse", "arm", "bucket", "next_weight"]


def bucket(agent_id: str, conversation_key: str, rollout_id: str) -> int:
    """A bucket 0..9999 fixed by its three inputs in every process and Python version.

    Not `hash()`: string hashing is salted per process (PYTHONHASHSEED).
    """
    key = f"{agent_id}\x00{conversation_key}\x00{rollout_id}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % BUCKETS


def arm(agent_id: str, conversation_key: str, rollout_id: str, weight_percent: float) -> Arm:
    """The candidate for buckets below the weight (in hundredths of a percent), else stable."""
    if bucket(agent_id, conversation_key, rollout_id) < weight_percent * 100:
        return "candidate"
    return "stable"


def next_weight(steps: Sequence[int], current: float) -> float | None:
    """The first step above the current weight; None once the last step is reached."""
    for step in sorted(steps):
        if step > current:
            return float(step)
    return None


@dataclass(frozen=True)
class CanaryLimits:
    # A candidate failing this share of its runs is aborted however few they are.
    failure_limit: float = 0.5
    # Fewer candidate runs than this say too little to advance on.
    min_runs: int = 10
    # Rates (per run) may exceed stable's by at most these, in absolute terms.
    max_error_rate_increase: float = 0.1
    max_tool_error_increase: float = 0.1
    max_negative_feedback_increase: float = 0.1
    # Per-run steps and tokens may be at most these multiples of stable's.
    max_steps_ratio: float = 1.5
    max_cost_ratio: float = 1.5


@dataclass(frozen=True)
class CanaryVerdict:
    action: Literal["abort", "pause", "advance"]
    reason: str


_TOLERANCE = 1e-9


def _per_run(count: int, runs: int) -> float:
    # An arm with no runs has no rate yet; 0 lets the other arm's rate stand alone.
    return count / runs if runs else 0.0


def analyse(stable: ArmStats, candidate: ArmStats, limits: CanaryLimits) -> CanaryVerdict:
    """Abort, pause or advance the rollout, the first rule that applies deciding."""
    if candidate.runs and _per_run(candidate.errors, candidate.runs) >= limits.failure_limit:
        return CanaryVerdict(
            "abort", f"failure limit: {candidate.errors} of {candidate.runs} runs failed"
        )
    # Too little traffic never promotes: a handful of lucky runs proves nothing.
    if candidate.runs < limits.min_runs:
        return CanaryVerdict(
            "pause", f"too little traffic: {candidate.runs} of {limits.min_runs} runs"
        )
    rates = (
        ("error rate", candidate.errors, stable.errors, limits.max_error_rate_increase),
        (
            "tool error rate",
            candidate.tool_errors,
            stable.tool_errors,
            limits.max_tool_error_increase,
        ),
        (
            "negative feedback rate",
            candidate.negative_feedback,
            stable.negative_feedback,
            limits.max_negative_feedback_increase,
        ),
    )
    for name, mine, theirs, allowed in rates:
        c, s = _per_run(mine, candidate.runs), _per_run(theirs, stable.runs)
        # The tolerance keeps an increase of exactly the allowance in, whatever the
        # float subtraction rounds it to (0.4 - 0.3 is 0.10000000000000003).
        if c - s > allowed + _TOLERANCE:
            return CanaryVerdict(
                "abort", f"{name} {c:.3f} exceeds stable's {s:.3f} by more than {allowed}"
            )
    ratios = (
        ("steps per run", candidate.steps, stable.steps, limits.max_steps_ratio),
        ("tokens per run", candidate.tokens, stable.tokens, limits.max_cost_ratio),
    )
    for name, mine, theirs, allowed in ratios:
        c, s = _per_run(mine, candidate.runs), _per_run(theirs, stable.runs)
        # With no stable baseline (no runs, or none of the measure) there is no ratio.
        if s > 0 and c / s > allowed + _TOLERANCE:
            return CanaryVerdict(
                "abort", f"{name} {c:.1f} is {c / s:.2f} times stable's {s:.1f} (max {allowed})"
            )
    if candidate.judge_losses > candidate.judge_wins:
        return CanaryVerdict(
            "abort",
            f"judge: candidate lost {candidate.judge_losses}, won {candidate.judge_wins}",
        )
    return CanaryVerdict("advance", "healthy")


@dataclass(frozen=True)
class FinishedRun:
    """One live run of a canary at its current weight, as the analysis counts it."""

    arm: Arm
    failed: bool
    tool_errors: int = 0
    negative_feedback: int = 0
    steps: int = 0
    tokens: int = 0


def arm_stats(runs: Sequence[FinishedRun], which: Arm) -> ArmStats:
    mine = [r for r in runs if r.arm == which]
    return ArmStats(
        runs=len(mine),
        errors=sum(r.failed for r in mine),
        tool_errors=sum(r.tool_errors for r in mine),
        negative_feedback=sum(r.negative_feedback for r in mine),
        steps=sum(r.steps for r in mine),
        tokens=sum(r.tokens for r in mine),
    )


def review(runs: Sequence[FinishedRun], every: int, limits: CanaryLimits) -> CanaryVerdict | None:
    """What a candidate run's end decides, `runs` being the step's finished runs in order.

    The failure limit aborts at once, as soon as the last `every` candidate runs hold
    enough failures that this interval's failure rate cannot end below the limit.
    Otherwise the full analysis comes every `every` candidate runs; in between, None.
    """
    candidate = [r for r in runs if r.arm == "candidate"]
    window = candidate[-every:]
    failed = sum(r.failed for r in window)
    if failed and failed >= math.ceil(limits.failure_limit * every - _TOLERANCE):
        return CanaryVerdict(
            "abort",
            f"failure limit: {failed} of the last {len(window)} candidate runs failed",
        )
    if not candidate or len(candidate) % every:
        return None
    return analyse(arm_stats(runs, "stable"), arm_stats(runs, "candidate"), limits)
