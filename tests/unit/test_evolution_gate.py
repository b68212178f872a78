"""The evolution gate (o_evolution/gate.py): judged cases, vetoes, SPRT, slices, case selection."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from o_contracts.experiments import ArmResult, CaseResult, GateSettings, Outcome
from o_evolution.gate import (
    CaseRef,
    Sprt,
    case_outcome,
    case_result,
    decide,
    judged,
    select_cases,
    sign_test,
    slices,
)

SETTINGS = GateSettings()


def arm(stop_reason: str = "end_turn", **fields: object) -> ArmResult:
    return ArmResult.model_validate(
        {"answer": "ok", "stop_reason": stop_reason, "tokens": 100, "latency_ms": 1000.0} | fields
    )


def case(
    outcome: Outcome,
    i: int = 0,
    *,
    tools: list[str] | None = None,
    conversation_id: str | None = None,
    candidate_tokens: int = 100,
) -> CaseResult:
    return CaseResult(
        case_id=f"run-{i}",
        conversation_id=conversation_id,
        parent=arm(tools_used=tools or []),
        candidate=arm(tokens=candidate_tokens),
        outcome=outcome,
    )


def cases(
    *outcomes: Outcome, tools: list[str] | None = None, candidate_tokens: int = 100
) -> list[CaseResult]:
    return [
        case(outcome, i, tools=tools, candidate_tokens=candidate_tokens)
        for i, outcome in enumerate(outcomes)
    ]


# The judge, in both orders


def test_the_candidate_wins_only_when_preferred_in_both_orders() -> None:
    # Parent first: the candidate is B; candidate first: it is A.
    assert judged("B", "A") == "candidate"
    assert judged("A", "B") == "parent"


def test_a_judge_that_prefers_a_position_is_a_tie() -> None:
    assert judged("A", "A") == "tie"
    assert judged("B", "B") == "tie"


def test_a_tie_in_either_order_is_a_tie() -> None:
    assert judged("tie", "A") == "tie"
    assert judged("B", "tie") == "tie"
    assert judged("tie", "tie") == "tie"


# Vetoes before the judge


def test_a_new_failure_loses_whatever_the_judge_says() -> None:
    assert case_outcome(arm(), arm("max_steps"), "candidate") == ("loss", "new failure: max_steps")


def test_more_tool_errors_lose_whatever_the_judge_says() -> None:
    assert case_outcome(arm(tool_errors=1), arm(tool_errors=3), "candidate") == (
        "loss",
        "more tool errors: 3 > 1",
    )


def test_a_failure_both_arms_share_is_left_to_the_judge() -> None:
    assert case_outcome(arm("error"), arm("error"), "candidate") == ("win", None)
    assert case_outcome(arm("error"), arm("error"), "parent") == ("loss", None)


def test_a_parent_failure_the_candidate_fixes_wins_whatever_the_judge_says() -> None:
    assert case_outcome(arm("llm_api_error"), arm(), "parent") == ("win", None)


def test_a_case_either_arm_could_not_replay_is_inconclusive_and_says_why() -> None:
    unsent = "tool 'send_email' not executed in shadow"
    assert case_outcome(arm(), arm("error", inconclusive=unsent), "parent") == (
        "inconclusive",
        f"candidate inconclusive: {unsent}",
    )
    assert case_outcome(arm(inconclusive=unsent), arm(), "candidate") == (
        "inconclusive",
        f"parent inconclusive: {unsent}",
    )


def test_no_judgement_is_a_tie() -> None:
    assert case_outcome(arm(), arm(), None) == ("tie", None)


def test_a_case_result_records_both_orderings_and_its_outcome() -> None:
    result = case_result("run-1", arm(), arm(), "B", "A", conversation_id="c-1")
    assert (result.outcome, result.veto, result.conversation_id) == ("win", None, "c-1")
    biased = case_result("run-2", arm(), arm(), "A", "A")
    assert (biased.judged_parent_first, biased.judged_candidate_first, biased.outcome) == (
        "A",
        "A",
        "tie",
    )
    assert case_result("run-3", arm(), arm(), "B", None).outcome == "tie"


# The SPRT


def test_nine_straight_wins_accept_at_the_ninth_and_eight_do_not() -> None:
    assert decide(cases(*["win"] * 8), SETTINGS, final=False).decision == "continue"
    report = decide(cases(*["win"] * 9), SETTINGS, final=False)
    assert report.decision == "accepted"
    assert [step.n for step in report.sprt] == list(range(1, 10))
    assert report.sprt[-1].llr == pytest.approx(9 * math.log(1.4))
    assert report.reason == "the candidate is better: 9 wins, 0 losses (llr 3.03 >= 2.77)"


def test_ties_and_inconclusive_cases_do_not_move_the_test() -> None:
    sprt = Sprt(SETTINGS)
    for outcome in ("tie", "win", "inconclusive", "tie"):
        sprt.record(outcome)  # type: ignore[arg-type]
    assert [(s.n, s.wins, s.losses) for s in sprt.steps] == [(1, 1, 0)]


def test_a_loss_heavy_run_shows_the_candidate_is_not_better() -> None:
    outcomes: list[Outcome] = ["loss", "win", "loss", "tie", "loss", "loss", "loss"]
    report = decide(cases(*outcomes), SETTINGS, final=False)
    # 1 * log(1.4) + 4 * log(0.6) = -1.71 <= log(0.2 / 0.95) = -1.56, at the sixth case.
    assert report.decision == "rejected"
    assert report.reason == "the candidate is not better: 1 wins, 4 losses (llr -1.71 <= -1.56)"
    assert len(report.sprt) == 5
    assert (report.wins, report.losses, report.ties) == (1, 5, 1)


def test_the_test_stops_at_the_first_bound_it_crosses() -> None:
    report = decide(cases(*["win"] * 9, "loss", "loss"), SETTINGS, final=False)
    assert report.decision == "accepted"
    assert report.sprt[-1].n == 9
    assert report.losses == 2


# Slices


def test_the_sign_test_is_the_binomial_tail() -> None:
    assert sign_test(4, 4) == 1 / 16
    assert sign_test(3, 4) == 5 / 16
    assert sign_test(0, 5) == 1.0


def test_a_candidate_better_overall_but_losing_every_web_search_is_rejected() -> None:
    better = cases(*["win"] * 9, tools=["archival_memory_search"])
    worse = [case("loss", 100 + i, tools=["web_search", "web_search"]) for i in range(4)]
    report = decide(better + worse, SETTINGS, final=False)
    assert report.decision == "rejected"
    assert report.reason == "slice tool:web_search regresses: 0 wins, 4 losses (p = 0.062)"
    by_name = {s.name: s for s in report.slices}
    assert by_name["tool:web_search"].cases == 4
    assert not by_name["stop:end_turn"].regressed


def test_a_slice_with_too_few_decisive_cases_cannot_reject() -> None:
    three_losses = cases("loss", "loss", "loss", "tie", tools=["web_search"])
    lenient = GateSettings(slice_p_value=0.2)

    def web(settings: GateSettings) -> tuple[int, float | None, bool]:
        (found,) = [s for s in slices(three_losses, settings) if s.name == "tool:web_search"]
        return found.losses, found.p_value, found.regressed

    # p = 1/8 is under the threshold, but 3 decisive cases are fewer than 4.
    assert web(lenient) == (3, 1 / 8, False)
    assert web(lenient.model_copy(update={"min_slice_cases": 3})) == (3, 1 / 8, True)


def test_a_case_falls_in_slices_of_its_tools_stop_feedback_and_conversation() -> None:
    negative = CaseResult(
        case_id="run-1",
        conversation_id="c-7",
        feedback="negative",
        parent=arm("max_steps", tools_used=["web_search", "send_message", "web_search"]),
        # The candidate's own tools do not move the case between slices.
        candidate=arm(tools_used=["run_code"]),
        outcome="win",
    )
    unnamed = case("tie", 2)
    assert [(s.name, s.cases, s.wins, s.ties) for s in slices([negative, unnamed], SETTINGS)] == [
        ("conversation:c-7", 1, 1, 0),
        ("conversation:default", 1, 0, 1),
        ("feedback:negative", 1, 1, 0),
        ("stop:end_turn", 1, 0, 1),
        ("stop:max_steps", 1, 1, 0),
        ("tool:send_message", 1, 1, 0),
        ("tool:web_search", 1, 1, 0),
    ]


# Cost, latency and the cap


def test_a_candidate_that_costs_too_much_more_is_rejected_even_if_better() -> None:
    report = decide(cases(*["win"] * 9, candidate_tokens=160), SETTINGS, final=False)
    assert report.decision == "rejected"
    assert report.cost_ratio == pytest.approx(1.6)
    assert report.reason == "the candidate uses 1.60x the parent's tokens (at most 1.5x)"


def test_inconclusive_cases_do_not_count_toward_the_cost() -> None:
    unreplayed = case("inconclusive", 9, candidate_tokens=10_000)
    report = decide([*cases("win", "tie"), unreplayed], SETTINGS, final=False)
    assert (report.cost_ratio, report.inconclusive) == (1.0, 1)


def slow(n: int, candidate_ms: float) -> CaseResult:
    return CaseResult(
        case_id=f"run-{n}",
        parent=arm(latency_ms=1000.0),
        candidate=arm(latency_ms=candidate_ms),
        outcome="win",
    )


def test_a_candidate_that_is_too_slow_is_rejected() -> None:
    report = decide([slow(n, 2500.0) for n in range(9)], SETTINGS, final=False)
    assert (report.decision, report.latency_ratio) == ("rejected", 2.5)
    assert report.reason == "the candidate takes 2.50x the parent's time (at most 2.0x)"


def test_cost_and_time_do_not_stop_an_evaluation_before_the_test_decides() -> None:
    report = decide([slow(0, 2500.0)], SETTINGS, final=False)
    assert (report.decision, report.latency_ratio) == ("continue", 2.5)


def test_one_slow_case_does_not_make_a_slow_candidate() -> None:
    times = [1000.0] * 8 + [9000.0]
    report = decide([slow(n, ms) for n, ms in enumerate(times)], SETTINGS, final=False)
    assert (report.decision, report.latency_ratio) == ("accepted", None)


def test_milliseconds_of_difference_are_noise_whatever_the_ratio() -> None:
    quick = [
        CaseResult(
            case_id=f"run-{n}",
            parent=arm(latency_ms=4.0),
            candidate=arm(latency_ms=30.0),
            outcome="win",
        )
        for n in range(9)
    ]
    assert decide(quick, SETTINGS, final=False).decision == "accepted"


def test_no_decision_at_the_cap_is_a_rejection() -> None:
    # 3 wins and 2 losses move the test by 3 * log(1.4) + 2 * log(0.6) = -0.01.
    mixed: list[Outcome] = ["win", "win", "loss", "win", "loss", "tie"] * 5
    report = decide(cases(*mixed), SETTINGS, final=False)
    assert report.decision == "rejected"
    assert report.reason == (
        "inconclusive after 30 cases: 15 wins, 10 losses, 5 ties, 0 inconclusive"
    )
    assert decide(cases(*mixed[:29]), SETTINGS, final=False).decision == "continue"


def test_no_decision_when_the_caller_has_no_more_cases_is_a_rejection() -> None:
    report = decide(cases("win", "tie"), SETTINGS, final=True)
    assert (report.decision, report.reason) == (
        "rejected",
        "inconclusive after 2 cases: 1 wins, 0 losses, 1 ties, 0 inconclusive",
    )


def test_settings_under_which_the_test_cannot_decide_are_refused() -> None:
    with pytest.raises(ValidationError, match="p1 must be greater than p0"):
        GateSettings(p0=0.6, p1=0.6)
    with pytest.raises(ValidationError, match="alpha \\+ beta must be less than 1"):
        GateSettings(alpha=0.5, beta=0.5)


# Case selection


def test_select_cases_keeps_the_newest_and_caps_each_conversation() -> None:
    runs = [
        CaseRef("r1", "busy", 1),
        CaseRef("r2", None, 2),
        CaseRef("r3", "busy", 3),
        CaseRef("r4", "quiet", 4),
        CaseRef("r5", "busy", 5),
        CaseRef("r6", None, 6),
        CaseRef("r7", "busy", 7),
    ]
    assert [r.run_id for r in select_cases(runs, 3, per_conversation=2)] == ["r5", "r6", "r7"]
    # r3 is newer than r2 but "busy" already gave two (r7 and r5).
    assert [r.run_id for r in select_cases(runs, 5, per_conversation=2)] == [
        "r2",
        "r4",
        "r5",
        "r6",
        "r7",
    ]
    assert [r.run_id for r in select_cases(runs, 10, per_conversation=1)] == ["r4", "r6", "r7"]
