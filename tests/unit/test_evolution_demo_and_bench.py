"""The evolution demo's scripted model and the shadow-cost benchmark's checks: the demo's
judge prefers the greeting in either order, and the benchmark's count of model calls per
case fails on a repeated or a missing call."""

from __future__ import annotations

from typing import Any

import pytest

from bench import demo_evolution, shadow_cost
from bench.tables import short, table
from o_evolution.judge import RUBRIC, prompt


def judge_call(case: int, a: str, b: str) -> dict[str, Any]:
    conversation = f"user: [case {case}] how are you?"
    return {
        "messages": [
            {"role": "system", "content": RUBRIC},
            {"role": "user", "content": prompt(conversation, a, b)},
        ]
    }


def arm_call(case: int, candidate: bool) -> dict[str, Any]:
    system = "You are an agent." + (f"\n{shadow_cost.RULE}" if candidate else "")
    return {
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": f"[case {case}] how are you?"},
        ]
    }


def one_case(case: int) -> list[dict[str, Any]]:
    old, new = "Noted.", "Hello Sam! Noted."
    return [
        arm_call(case, candidate=False),
        arm_call(case, candidate=True),
        judge_call(case, old, new),
        judge_call(case, new, old),
    ]


def test_the_demo_judge_prefers_the_answer_that_greets_in_either_order() -> None:
    greets, plain = "Hello Sam! Lisbon.", "Lisbon."
    assert demo_evolution.scripted(judge_call(0, plain, greets)).content == "B"
    assert demo_evolution.scripted(judge_call(0, greets, plain)).content == "A"
    assert demo_evolution.scripted(judge_call(0, plain, plain)).content == "tie"


def test_the_demo_agent_greets_by_name_only_with_the_rule() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "<human>Name: Ana</human>"},
            {"role": "user", "content": "What is 12 times 12? (live 3)"},
        ]
    }
    assert demo_evolution.scripted(body).content == "144."
    body["messages"][0]["content"] += "\n" + demo_evolution.RULE
    assert demo_evolution.scripted(body).content == "Hello Ana! 144."


def test_the_benchmark_accepts_two_arm_and_two_judge_calls_per_case() -> None:
    shadow_cost.check_calls(one_case(0) + one_case(1), cases=2)


def test_the_benchmark_fails_on_an_arm_asked_twice() -> None:
    calls = one_case(0) + one_case(1)
    calls[5] = calls[4]  # case 1's parent arm asked twice, its candidate arm never
    with pytest.raises(AssertionError, match="case 1"):
        shadow_cost.check_calls(calls, cases=2)


def test_the_benchmark_fails_on_a_judge_ordering_missing() -> None:
    calls = one_case(0)[:3] + one_case(1)
    with pytest.raises(AssertionError, match="case 0"):
        shadow_cost.check_calls(calls, cases=2)


def test_tables_align_numbers_right_and_text_left() -> None:
    printed = table(("case", "answer", "llr"), [(1, "Lisbon.", "0.34"), (10, "-", "-")])
    assert printed.splitlines() == [
        "  case  answer    llr",
        "  ----  -------  ----",
        "     1  Lisbon.  0.34",
        "    10  -           -",
    ]
    assert short("Hello Sam!   Jane Austen, in 1813.", 20) == "Hello Sam! Jane A..."
