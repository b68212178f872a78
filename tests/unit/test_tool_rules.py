"""Letta's nine tool rules: validation messages and the solver's decisions."""

from __future__ import annotations

from typing import Any

import pytest

from o_contracts.tool_rules import InvalidToolRule, ToolRuleSolver, validate_rules

TOOLS = {"a", "b", "c", "send_message"}


def rule(kind: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "tool_name": name, **extra}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (rule("sometimes", "a"), "tool_rules[0]: unknown type 'sometimes'"),
        (rule("exit_loop", ""), "tool_rules[0] (exit_loop on ''): tool_name must be"),
        (rule("constrain_child_tools", "a"), "(constrain_child_tools on 'a'): children must"),
        (rule("parent_last_tool", "a", children=[]), "(parent_last_tool on 'a'): children"),
        (rule("conditional", "a", child_output_mapping={}), "child_output_mapping must map"),
        (rule("max_count_per_step", "a", max_count_limit=0), "max_count_limit must be a positive"),
    ],
)
def test_invalid_rules_are_named(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidToolRule) as info:
        validate_rules([bad])
    assert message in str(info.value)


def test_exit_and_continue_on_one_tool_conflict() -> None:
    with pytest.raises(InvalidToolRule, match="'a' cannot be both exit_loop and continue_loop"):
        validate_rules([rule("exit_loop", "a"), rule("continue_loop", "a")])


def test_run_first_then_children_then_anything() -> None:
    solver = ToolRuleSolver(
        [rule("run_first", "a"), rule("constrain_child_tools", "a", children=["b"])]
    )
    assert solver.forces_tool_call() and solver.allowed(TOOLS, None) == {"a"}
    solver.record("a")
    assert not solver.forces_tool_call() and solver.allowed(TOOLS, "ok") == {"b"}
    solver.record("b")
    assert solver.allowed(TOOLS, "ok") == TOOLS


def test_parent_conditional_and_max_count() -> None:
    parent = ToolRuleSolver([rule("parent_last_tool", "a", children=["b"])])
    assert parent.allowed(TOOLS, None) == TOOLS - {"b"}
    parent.record("a")
    assert parent.allowed(TOOLS, None) == {"b"}

    cond = ToolRuleSolver(
        [rule("conditional", "a", child_output_mapping={"yes": "b", "no": "c"}, default_child="a")]
    )
    cond.record("a")
    assert cond.allowed(TOOLS, "yes") == {"b"}
    assert cond.allowed(TOOLS, '{"message": "no"}') == {"c"}
    assert cond.allowed(TOOLS, "maybe") == {"a"}

    counted = ToolRuleSolver([rule("max_count_per_step", "a", max_count_limit=2)])
    counted.record("a")
    assert "a" in counted.allowed(TOOLS, None)
    counted.record("a")
    assert counted.allowed(TOOLS, None) == TOOLS - {"a"}


def test_loop_rules() -> None:
    solver = ToolRuleSolver(
        [
            rule("exit_loop", "a"),
            rule("continue_loop", "b"),
            rule("required_before_exit", "c"),
            rule("requires_approval", "b"),
        ]
    )
    assert solver.is_terminal("a") and not solver.is_terminal("b")
    assert solver.continues("b") and solver.requires_approval("b")
    assert solver.uncalled_required(TOOLS) == ["c"]
    solver.record("c")
    assert solver.uncalled_required(TOOLS) == []
    prompt = solver.prompt()
    assert "<tool_usage_rules>" in prompt
    assert "a ends your response (yields control) when called" in prompt
