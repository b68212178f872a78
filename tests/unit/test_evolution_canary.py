"""Canary rollout (o_evolution/canary.py): the stable traffic split and the analysis rules."""

from __future__ import annotations

import hashlib
import random

from o_evolution.canary import (
    ArmStats,
    CanaryLimits,
    CanaryVerdict,
    FinishedRun,
    analyse,
    arm,
    arm_stats,
    bucket,
    next_weight,
    review,
)

LIMITS = CanaryLimits()
STABLE = ArmStats(runs=100, errors=5, tool_errors=5, negative_feedback=5, steps=300, tokens=30000)


def conversations(n: int = 10_000) -> list[str]:
    rng = random.Random(14)
    return [f"conv-{rng.getrandbits(64):016x}" for _ in range(n)]


def candidates(weight: float, rollout: str = "rollout-1") -> set[str]:
    return {c for c in conversations() if arm("agent-1", c, rollout, weight) == "candidate"}


def healthy(**changes: int) -> ArmStats:
    fields = dict(runs=100, errors=5, tool_errors=5, negative_feedback=5, steps=300, tokens=30000)
    fields.update(changes)
    return ArmStats(**fields)


def test_a_quarter_of_conversations_take_the_candidate_at_weight_25() -> None:
    share = len(candidates(25)) / 10_000
    assert 0.23 <= share <= 0.27


def test_larger_weights_contain_the_conversations_of_smaller_ones() -> None:
    five, quarter, half = candidates(5), candidates(25), candidates(50)
    assert five < quarter < half
    assert len(five) > 0


def test_weights_0_and_100_send_everyone_to_one_arm() -> None:
    assert candidates(0) == set()
    assert candidates(100) == set(conversations())


def test_the_same_inputs_always_give_the_same_bucket_and_arm() -> None:
    # Pinned: sha256, unlike hash(), is the same in every process and Python version.
    assert bucket("agent-1", "conv-1", "rollout-1") == 309
    assert bucket("agent-1", "conv-2", "rollout-1") == 7250
    assert arm("agent-1", "conv-1", "rollout-1", 5) == "candidate"
    assert arm("agent-1", "conv-1", "rollout-1", 3) == "stable"
    assert [arm("agent-1", c, "rollout-1", 25) for c in conversations(200)] == [
        arm("agent-1", c, "rollout-1", 25) for c in conversations(200)
    ]


def test_the_bucket_is_sha256_of_the_three_ids_mod_10000() -> None:
    digest = hashlib.sha256(b"agent-1\x00conv-1\x00rollout-1").digest()
    assert bucket("agent-1", "conv-1", "rollout-1") == int.from_bytes(digest[:8], "big") % 10_000


def test_a_new_rollout_reshuffles_which_conversations_go_first() -> None:
    first, second = candidates(25, "rollout-1"), candidates(25, "rollout-2")
    overlap = len(first & second) / len(first)
    # Independent draws overlap by about the weight (25%), not wholly.
    assert 0.20 <= overlap <= 0.30


def test_next_weight_walks_the_steps_then_ends() -> None:
    steps = [5, 25, 50, 100]
    walked: list[float] = []
    current = next_weight(steps, 0)
    while current is not None:
        walked.append(current)
        current = next_weight(steps, current)
    assert walked == [5.0, 25.0, 50.0, 100.0]
    assert next_weight(steps, 100) is None
    assert next_weight(steps, 30) == 50.0


def test_abort_on_the_failure_limit_even_with_few_runs() -> None:
    candidate = ArmStats(runs=2, errors=1, tool_errors=0, negative_feedback=0, steps=6, tokens=600)
    assert analyse(STABLE, candidate, LIMITS) == CanaryVerdict(
        "abort", "failure limit: 1 of 2 runs failed"
    )
    assert analyse(STABLE, healthy(runs=10, errors=5), LIMITS) == CanaryVerdict(
        "abort", "failure limit: 5 of 10 runs failed"
    )


def test_pause_with_too_little_traffic_never_advance() -> None:
    candidate = ArmStats(runs=3, errors=0, tool_errors=0, negative_feedback=0, steps=9, tokens=900)
    assert analyse(STABLE, candidate, LIMITS) == CanaryVerdict(
        "pause", "too little traffic: 3 of 10 runs"
    )
    empty = ArmStats(runs=0, errors=0, tool_errors=0, negative_feedback=0, steps=0, tokens=0)
    assert analyse(STABLE, empty, LIMITS).action == "pause"


def test_abort_naming_the_error_rate() -> None:
    verdict = analyse(STABLE, healthy(errors=16), LIMITS)
    assert verdict.action == "abort"
    assert verdict.reason.startswith("error rate 0.160 exceeds stable's 0.050")


def test_an_increase_within_the_allowance_advances() -> None:
    assert analyse(STABLE, healthy(errors=15), LIMITS).action == "advance"
    # Exactly the allowance, though 0.4 - 0.3 rounds above 0.1 in floats.
    stable = healthy(tool_errors=30)
    assert analyse(stable, healthy(tool_errors=40), LIMITS).action == "advance"
    assert analyse(STABLE, healthy(steps=450), LIMITS).action == "advance"


def test_abort_naming_the_tool_error_rate() -> None:
    verdict = analyse(STABLE, healthy(tool_errors=20), LIMITS)
    assert verdict.action == "abort"
    assert verdict.reason.startswith("tool error rate 0.200")


def test_abort_naming_the_negative_feedback_rate() -> None:
    verdict = analyse(STABLE, healthy(negative_feedback=30), LIMITS)
    assert verdict.action == "abort"
    assert verdict.reason.startswith("negative feedback rate 0.300")


def test_abort_naming_steps_per_run() -> None:
    verdict = analyse(STABLE, healthy(steps=460), LIMITS)
    assert verdict == CanaryVerdict(
        "abort", "steps per run 4.6 is 1.53 times stable's 3.0 (max 1.5)"
    )


def test_abort_naming_tokens_per_run() -> None:
    verdict = analyse(STABLE, healthy(tokens=46000), LIMITS)
    assert verdict.action == "abort"
    assert verdict.reason.startswith("tokens per run 460.0 is 1.53 times")


def test_abort_when_the_judge_prefers_stable() -> None:
    verdict = analyse(STABLE, healthy(judge_losses=4, judge_wins=3), LIMITS)
    assert verdict == CanaryVerdict("abort", "judge: candidate lost 4, won 3")
    assert analyse(STABLE, healthy(judge_losses=3, judge_wins=3), LIMITS).action == "advance"


def test_advance_when_healthy() -> None:
    assert analyse(STABLE, healthy(), LIMITS) == CanaryVerdict("advance", "healthy")


def test_a_stable_arm_without_runs_counts_as_rate_0_and_no_cost_baseline() -> None:
    none = ArmStats(runs=0, errors=0, tool_errors=0, negative_feedback=0, steps=0, tokens=0)
    assert analyse(none, healthy(errors=11), LIMITS).reason.startswith("error rate 0.110")
    assert analyse(none, healthy(errors=10, steps=10_000), LIMITS).action == "advance"


def run(arm_: str, failed: bool = False) -> FinishedRun:
    return FinishedRun(arm=arm_, failed=failed, steps=1, tokens=100)  # type: ignore[arg-type]


def test_a_candidate_run_between_analyses_decides_nothing() -> None:
    runs = [run("stable"), run("candidate"), run("candidate")]
    assert review(runs, 3, CanaryLimits(min_runs=3)) is None


def test_every_kth_candidate_run_brings_the_full_analysis() -> None:
    runs = [run("stable"), run("candidate"), run("stable"), run("candidate"), run("candidate")]
    assert review(runs, 3, CanaryLimits(min_runs=3)) == CanaryVerdict("advance", "healthy")


def test_the_failure_limit_aborts_as_soon_as_the_interval_cannot_pass() -> None:
    # Half of an interval of 4 failed after only two candidate runs: abort now.
    runs = [run("candidate", failed=True), run("stable"), run("candidate", failed=True)]
    verdict = review(runs, 4, CanaryLimits(failure_limit=0.5, min_runs=4))
    assert verdict is not None and verdict.action == "abort"
    assert verdict.reason == "failure limit: 2 of the last 2 candidate runs failed"


def test_old_failures_outside_the_window_do_not_abort() -> None:
    runs = [run("candidate", failed=True)] + [run("candidate") for _ in range(4)]
    assert review(runs, 4, CanaryLimits(failure_limit=0.5, min_runs=4)) is None


def test_arm_stats_count_one_arm() -> None:
    runs = [run("candidate", failed=True), run("stable"), run("candidate")]
    assert arm_stats(runs, "candidate") == ArmStats(runs=2, errors=1, steps=2, tokens=200)
