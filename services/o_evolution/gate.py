"""The evolution gate: whether a candidate version of an agent replaces its parent.

Pure functions, no I/O: the caller replays recorded runs in both arms, has a
frozen judge compare the answers and passes the results in. Keeping the
decision here, outside anything the candidate can edit, is what makes it a
gate (the Darwin Gödel Machine's agents learned to game evaluators within
their reach).

A case is decided by hard vetoes first (a new failure, more tool errors), then
by the judge, who sees the two answers in both orders: LLM judges favour a
position, so only a preference that survives the swap counts. Decisive cases
feed Wald's SPRT on P(candidate wins), which stops as soon as the evidence
suffices; slices of the cases (by tool, stop reason, feedback, conversation)
catch a candidate that is better on average but clearly worse somewhere.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Literal

from o_contracts.experiments import (
    ArmResult,
    CaseResult,
    GateReport,
    GateSettings,
    Outcome,
    Preference,
    SliceResult,
    SprtStep,
)

Preferred = Literal["candidate", "parent", "tie"]

# Stop reasons that mean the run failed (Letta's, some O never records).
FAILURE_STOPS = frozenset(
    {"error", "llm_api_error", "max_steps", "invalid_tool_call", "invalid_llm_response"}
)


def judged(parent_first: Preference, candidate_first: Preference) -> Preferred:
    """Which answer the judge preferred in both orders; a tie unless it held after the swap.

    The first ordering shows the parent's answer as A, the second the candidate's:
    "A" then "A" is a judge that prefers whatever comes first, not either answer.
    """
    if parent_first == "B" and candidate_first == "A":
        return "candidate"
    if parent_first == "A" and candidate_first == "B":
        return "parent"
    return "tie"


def case_outcome(
    parent: ArmResult, candidate: ArmResult, preferred: Preferred | None
) -> tuple[Outcome, str | None]:
    """One case's outcome for the candidate, and the veto that decided it, if one did.

    A case either arm could not replay faithfully is inconclusive (the string says
    why). Failures are judged before answers: a judge may like a fluent answer from
    a run that hit max_steps, but the user saw a failed run. A candidate that fails
    where the parent did not, or has more tool errors, loses; one that completes
    where the parent failed wins (veto None: nothing was vetoed). Otherwise the
    judge decides; no judgement (None) is a tie.
    """
    unreplayed = [
        f"{arm} inconclusive: {result.inconclusive}"
        for arm, result in (("parent", parent), ("candidate", candidate))
        if result.inconclusive is not None
    ]
    if unreplayed:
        return "inconclusive", "; ".join(unreplayed)
    parent_failed = parent.stop_reason in FAILURE_STOPS
    candidate_failed = candidate.stop_reason in FAILURE_STOPS
    if candidate_failed and not parent_failed:
        return "loss", f"new failure: {candidate.stop_reason}"
    if candidate.tool_errors > parent.tool_errors:
        return "loss", f"more tool errors: {candidate.tool_errors} > {parent.tool_errors}"
    if parent_failed and not candidate_failed:
        return "win", None
    if preferred == "candidate":
        return "win", None
    if preferred == "parent":
        return "loss", None
    return "tie", None


def case_result(
    case_id: str,
    parent: ArmResult,
    candidate: ArmResult,
    judged_parent_first: Preference | None = None,
    judged_candidate_first: Preference | None = None,
    *,
    conversation_id: str | None = None,
    feedback: Literal["positive", "negative"] | None = None,
) -> CaseResult:
    """A replayed case with its outcome: the judge's two answers combined, then the vetoes."""
    preferred = (
        judged(judged_parent_first, judged_candidate_first)
        if judged_parent_first is not None and judged_candidate_first is not None
        else None
    )
    outcome, veto = case_outcome(parent, candidate, preferred)
    return CaseResult(
        case_id=case_id,
        conversation_id=conversation_id,
        feedback=feedback,
        parent=parent,
        candidate=candidate,
        judged_parent_first=judged_parent_first,
        judged_candidate_first=judged_candidate_first,
        outcome=outcome,
        veto=veto,
    )


class Sprt:
    """Wald's sequential probability ratio test of P(candidate wins | decisive case):
    H0 p = p0 (no better) against H1 p = p1 (better).

    Each win adds log(p1/p0), each loss log((1-p1)/(1-p0)); the test accepts H1 at
    log((1-beta)/alpha) and H0 at log(beta/(1-alpha)). With the defaults (0.5, 0.7,
    0.05, 0.2) that is 9 straight wins to accept, or 4 straight losses to reject.
    Ties and inconclusive cases say nothing about p and do not move it. The test
    stops at the first bound it crosses: later cases do not reopen it, which is what
    its error rates assume.
    """

    def __init__(self, settings: GateSettings) -> None:
        self._win = math.log(settings.p1 / settings.p0)
        self._loss = math.log((1 - settings.p1) / (1 - settings.p0))
        self.upper = math.log((1 - settings.beta) / settings.alpha)
        self.lower = math.log(settings.beta / (1 - settings.alpha))
        self.steps: list[SprtStep] = []

    @property
    def llr(self) -> float:
        return self.steps[-1].llr if self.steps else 0.0

    @property
    def verdict(self) -> Literal["better", "not better"] | None:
        if self.llr >= self.upper:
            return "better"
        if self.llr <= self.lower:
            return "not better"
        return None

    def record(self, outcome: Outcome) -> None:
        if outcome not in ("win", "loss") or self.verdict is not None:
            return
        last = self.steps[-1] if self.steps else SprtStep(n=0, wins=0, losses=0, llr=0.0)
        wins = last.wins + (outcome == "win")
        losses = last.losses + (outcome == "loss")
        # From the counts rather than a running sum, so 9 wins are exactly 9 * log(p1/p0).
        llr = wins * self._win + losses * self._loss
        self.steps.append(SprtStep(n=last.n + 1, wins=wins, losses=losses, llr=llr))


def sign_test(losses: int, decisive: int) -> float:
    """P(X >= losses) for X ~ Binomial(decisive, 1/2): how surprising this many losses
    would be from a candidate no worse than its parent."""
    tail = sum(math.comb(decisive, k) for k in range(losses, decisive + 1))
    return tail / 2.0**decisive


def _slice_names(case: CaseResult) -> list[str]:
    # The parent's tools and stop reason: the recorded behaviour, which the
    # candidate's own choices must not be able to move a case out of.
    names = [f"tool:{tool}" for tool in dict.fromkeys(case.parent.tools_used)]
    names.append(f"stop:{case.parent.stop_reason}")
    if case.feedback is not None:
        names.append(f"feedback:{case.feedback}")
    names.append(f"conversation:{case.conversation_id or 'default'}")
    return names


def slices(cases: Sequence[CaseResult], settings: GateSettings) -> list[SliceResult]:
    """Every slice of the cases, sorted by name, each tested for a clear regression.

    `cases` counts every case in the slice, inconclusive ones included. Only
    decisive cases enter the sign test, and a slice needs min_slice_cases of them
    before it can reject: with the defaults, 4 losses of 4 (p = 1/16) do, 3 of 3
    cannot.
    """
    members: defaultdict[str, list[Outcome]] = defaultdict(list)
    for case in cases:
        for name in _slice_names(case):
            members[name].append(case.outcome)
    results = []
    for name in sorted(members):
        counts = Counter(members[name])
        decisive = counts["win"] + counts["loss"]
        p_value = sign_test(counts["loss"], decisive) if decisive else None
        results.append(
            SliceResult(
                name=name,
                cases=len(members[name]),
                wins=counts["win"],
                losses=counts["loss"],
                ties=counts["tie"],
                regressed=p_value is not None
                and decisive >= settings.min_slice_cases
                and p_value <= settings.slice_p_value,
                p_value=p_value,
            )
        )
    return results


def _ratio(candidate: float, parent: float) -> float | None:
    return candidate / parent if parent > 0 else None


def _latency_ratio(measured: Sequence[CaseResult], floor_ms: float) -> float | None:
    """The candidate's median time per case over the parent's; None while the two
    medians are within `floor_ms` of each other (scheduling noise, not a slower agent)."""
    if not measured:
        return None
    new = statistics.median(case.candidate.latency_ms for case in measured)
    old = statistics.median(case.parent.latency_ms for case in measured)
    if new - old <= floor_ms:
        return None
    return _ratio(new, old)


def decide(cases: Sequence[CaseResult], settings: GateSettings, *, final: bool) -> GateReport:
    """The gate's decision on the cases so far, in the order they ran.

    Rejections come first, so a candidate the SPRT accepts is still rejected for a
    regressed slice, or for costing or taking too much more than its parent. With
    no decision yet it is "continue", unless `final` (the caller has no more cases)
    or max_cases have run: then the candidate is rejected as inconclusive, since a
    change must earn its place.
    """
    sprt = Sprt(settings)
    for case in cases:
        sprt.record(case.outcome)
    counts = Counter(case.outcome for case in cases)
    tallied = slices(cases, settings)
    measured = [case for case in cases if case.outcome != "inconclusive"]
    cost = _ratio(
        sum(case.candidate.tokens for case in measured),
        sum(case.parent.tokens for case in measured),
    )
    latency = _latency_ratio(measured, settings.latency_floor_ms)

    def report(decision: Literal["accepted", "rejected", "continue"], reason: str) -> GateReport:
        return GateReport(
            decision=decision,
            reason=reason,
            wins=counts["win"],
            losses=counts["loss"],
            ties=counts["tie"],
            inconclusive=counts["inconclusive"],
            sprt=sprt.steps,
            slices=tallied,
            cost_ratio=cost,
            latency_ratio=latency,
        )

    regressed = [s for s in tallied if s.regressed]
    if regressed:
        return report(
            "rejected",
            "; ".join(
                f"slice {s.name} regresses: {s.wins} wins, {s.losses} losses (p = {s.p_value:.3f})"
                for s in regressed
            ),
        )
    last = sprt.steps[-1] if sprt.steps else None
    if sprt.verdict == "not better" and last is not None:
        return report(
            "rejected",
            f"the candidate is not better: {last.wins} wins, {last.losses} losses"
            f" (llr {last.llr:.2f} <= {sprt.lower:.2f})",
        )
    if sprt.verdict == "better" and last is not None:
        # Cost and time bound an otherwise accepted candidate; before that they decide
        # nothing (a case or two of wall time on a busy machine is noise).
        if cost is not None and cost > settings.max_cost_ratio:
            return report(
                "rejected",
                f"the candidate uses {cost:.2f}x the parent's tokens"
                f" (at most {settings.max_cost_ratio}x)",
            )
        if latency is not None and latency > settings.max_latency_ratio:
            return report(
                "rejected",
                f"the candidate takes {latency:.2f}x the parent's time"
                f" (at most {settings.max_latency_ratio}x)",
            )
        return report(
            "accepted",
            f"the candidate is better: {last.wins} wins, {last.losses} losses"
            f" (llr {last.llr:.2f} >= {sprt.upper:.2f})",
        )
    tally = (
        f"{counts['win']} wins, {counts['loss']} losses, {counts['tie']} ties,"
        f" {counts['inconclusive']} inconclusive"
    )
    if final or len(cases) >= settings.max_cases:
        return report("rejected", f"inconclusive after {len(cases)} cases: {tally}")
    return report("continue", f"no decision after {len(cases)} cases: {tally}")


@dataclass(frozen=True)
class CaseRef:
    """A recorded run that may be replayed as a case."""

    run_id: str
    conversation_id: str | None
    completed_seq: int
    _: KW_ONLY
    # Where its RunStarted is (where reading it back begins).
    started_seq: int = 1
    # The run's rating by its users (o_evolution/feedback.py): the case's feedback slice.
    feedback: Literal["positive", "negative"] | None = None


def select_cases(runs: Sequence[CaseRef], n: int, per_conversation: int) -> list[CaseRef]:
    """The n most recent runs, at most per_conversation from any one conversation, oldest first.

    Recent runs are what the agent does now. The cap keeps one busy conversation
    from standing for all users: its runs share a context and fail together, so
    they are weaker evidence than the same number spread out. Runs outside a
    conversation (None) count as one conversation, the default.
    """
    taken: Counter[str | None] = Counter()
    chosen: list[CaseRef] = []
    for run in sorted(runs, key=lambda r: (r.completed_seq, r.run_id), reverse=True):
        if len(chosen) >= n:
            break
        if taken[run.conversation_id] < per_conversation:
            taken[run.conversation_id] += 1
            chosen.append(run)
    return chosen[::-1]
