"""Shadow evaluations of a candidate agent against its parent: cases, settings, the gate's report.

A candidate version of an agent is replayed beside its parent on recorded runs
(the cases); a frozen judge compares the two answers twice, once in each order.
These values carry what each arm did, what the judge said and what the gate
(o_evolution/gate.py) decided, so the decision can be recorded and read back.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from o_contracts.models import Value

# What the judge answered for one ordering of the two answers.
Preference = Literal["A", "B", "tie"]
# One case's result, from the candidate's side.
Outcome = Literal["win", "loss", "tie", "inconclusive"]


class ArmResult(Value):
    """One arm's shadow run of one case."""

    answer: str
    stop_reason: str
    tool_errors: int = Field(default=0, ge=0)
    steps: int = Field(default=0, ge=0)
    tokens: int = Field(default=0, ge=0)
    latency_ms: float = Field(default=0.0, ge=0)
    # Tool names called, in order.
    tools_used: list[str] = Field(default_factory=list)
    # Set when the shadow could not reproduce the run faithfully, e.g.
    # "tool 'send_email' not executed in shadow": such a case says nothing.
    inconclusive: str | None = None


class CaseResult(Value):
    """One recorded run replayed by both arms, and how it was judged."""

    case_id: str
    conversation_id: str | None = None
    feedback: Literal["positive", "negative"] | None = None
    parent: ArmResult
    candidate: ArmResult
    # The first ordering shows the parent's answer as A; the second shows the candidate's as A.
    judged_parent_first: Preference | None = None
    judged_candidate_first: Preference | None = None
    outcome: Outcome
    # Why the case was lost (or is inconclusive) regardless of the judge.
    veto: str | None = None


class ArmStats(Value):
    """What one arm of a canary rollout came to at its current weight (live runs)."""

    runs: int = Field(default=0, ge=0)
    # Runs that ended in error (stop reason error, or max steps reached).
    errors: int = Field(default=0, ge=0)
    tool_errors: int = Field(default=0, ge=0)
    negative_feedback: int = Field(default=0, ge=0)
    steps: int = Field(default=0, ge=0)
    tokens: int = Field(default=0, ge=0)
    # A sampled judge's paired comparisons of the candidate against stable.
    judge_losses: int = Field(default=0, ge=0)
    judge_wins: int = Field(default=0, ge=0)


class SprtStep(Value):
    """The sequential test after one decisive case."""

    n: int
    wins: int
    losses: int
    llr: float


class SliceResult(Value):
    """The cases sharing one trait (a tool the parent used, a stop reason, ...), tallied."""

    name: str
    cases: int
    wins: int
    losses: int
    ties: int
    regressed: bool
    # The one-sided sign test's P(losses at least this many | no difference); None without
    # decisive cases.
    p_value: float | None = None


class GateSettings(Value):
    """The gate's thresholds. p0 and p1 are P(candidate wins | decisive case) under
    "no better" and "better"; alpha and beta the errors the SPRT tolerates."""

    p0: float = Field(default=0.5, gt=0, lt=1)
    p1: float = Field(default=0.7, gt=0, lt=1)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    beta: float = Field(default=0.2, gt=0, lt=1)
    max_cases: int = Field(default=30, ge=1)
    # Decisive cases a slice needs before it can reject.
    min_slice_cases: int = Field(default=4, ge=1)
    # One-sided sign test threshold for "clearly regresses".
    slice_p_value: float = Field(default=0.1, gt=0, le=1)
    # Candidate tokens / parent tokens over the cases.
    max_cost_ratio: float = Field(default=1.5, gt=0)
    # Candidate median time per case / parent's, once they differ by more than the floor.
    max_latency_ratio: float = Field(default=2.0, gt=0)
    latency_floor_ms: float = Field(default=50.0, ge=0)

    @model_validator(mode="after")
    def _a_test_that_can_decide(self) -> GateSettings:
        if self.p1 <= self.p0:
            raise ValueError("p1 must be greater than p0")
        # Otherwise the SPRT's bounds are on the same side of 0 and it decides before any case.
        if self.alpha + self.beta >= 1:
            raise ValueError("alpha + beta must be less than 1")
        return self


class GateReport(Value):
    decision: Literal["accepted", "rejected", "continue"]
    reason: str
    wins: int
    losses: int
    ties: int
    inconclusive: int
    # One step per decisive case, up to the one where the test decided.
    sprt: list[SprtStep]
    slices: list[SliceResult]
    cost_ratio: float | None = None
    latency_ratio: float | None = None
