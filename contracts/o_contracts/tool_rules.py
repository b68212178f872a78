"""Letta's nine tool rules: validated where agents are written, applied by the agent loop.

A rule is a dict with `type` and `tool_name` plus type-specific fields. The
solver follows Letta's semantics (letta/helpers/tool_rule_solver.py):

* run_first: the first tool call of a turn must be one of these tools.
* constrain_child_tools: after `tool_name`, only `children` may be called.
* parent_last_tool: `children` may only be called right after `tool_name`.
* conditional: after `tool_name`, its output picks the next tool
  (`child_output_mapping`, else `default_child`, else any).
* max_count_per_step: `tool_name` at most `max_count_limit` times per turn.
* exit_loop: calling `tool_name` ends the turn (stop_reason `tool_rule`).
* continue_loop: calling `tool_name` makes the agent take another step.
* required_before_exit: the turn cannot end before `tool_name` was called.
* requires_approval: calling `tool_name` waits for a person's approval.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

RULE_TYPES = (
    "run_first",
    "constrain_child_tools",
    "parent_last_tool",
    "conditional",
    "max_count_per_step",
    "exit_loop",
    "continue_loop",
    "required_before_exit",
    "requires_approval",
)


class InvalidToolRule(ValueError):
    pass


def validate_rules(rules: list[dict[str, Any]]) -> None:
    """Raise InvalidToolRule naming the first bad rule."""
    for i, rule in enumerate(rules):
        kind = rule.get("type")
        name = rule.get("tool_name")
        where = f"tool_rules[{i}] ({kind} on '{name}')"
        if kind not in RULE_TYPES:
            raise InvalidToolRule(
                f"tool_rules[{i}]: unknown type '{kind}' (one of: {', '.join(RULE_TYPES)})"
            )
        if not isinstance(name, str) or not name:
            raise InvalidToolRule(f"{where}: tool_name must be a non-empty string")
        if kind in ("constrain_child_tools", "parent_last_tool"):
            children = rule.get("children")
            if not isinstance(children, list) or not children:
                raise InvalidToolRule(f"{where}: children must be a non-empty list of tool names")
            if not all(isinstance(c, str) and c for c in children):
                raise InvalidToolRule(f"{where}: children must be tool names")
        if kind == "conditional":
            mapping = rule.get("child_output_mapping")
            if not isinstance(mapping, dict) or not mapping:
                raise InvalidToolRule(
                    f"{where}: child_output_mapping must map at least one output to a tool"
                )
        if kind == "max_count_per_step":
            limit = rule.get("max_count_limit")
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise InvalidToolRule(f"{where}: max_count_limit must be a positive integer")
    terminal = {r["tool_name"] for r in rules if r["type"] == "exit_loop"}
    both = terminal & {r["tool_name"] for r in rules if r["type"] == "continue_loop"}
    if both:
        raise InvalidToolRule(
            f"tool rules: '{sorted(both)[0]}' cannot be both exit_loop and continue_loop"
        )


def _matches(output: str, key: Any) -> bool:
    if isinstance(key, bool):
        return output.lower() == str(key).lower()
    if isinstance(key, int | float):
        try:
            return float(output) == float(key)
        except ValueError:
            return False
    return output == str(key)


@dataclass
class ToolRuleSolver:
    rules: list[dict[str, Any]]
    history: list[str] = field(default_factory=list)

    def _of(self, *kinds: str) -> list[dict[str, Any]]:
        return [r for r in self.rules if r["type"] in kinds]

    def allowed(self, available: set[str], last_output: str | None) -> set[str]:
        """The tools the model may call now (never empty: then everything is allowed)."""
        init = self._of("run_first")
        if not self.history and init:
            return {r["tool_name"] for r in init} & available or set(available)
        last = self.history[-1] if self.history else None
        allowed = set(available)
        for rule in self._of("constrain_child_tools"):
            if last == rule["tool_name"]:
                allowed &= set(rule["children"])
        for rule in self._of("parent_last_tool"):
            children = set(rule["children"])
            allowed &= children if last == rule["tool_name"] else available - children
        for rule in self._of("conditional"):
            if last == rule["tool_name"]:
                allowed &= self._conditional(rule, available, last_output)
        for rule in self._of("max_count_per_step"):
            if self.history.count(rule["tool_name"]) >= rule["max_count_limit"]:
                allowed.discard(rule["tool_name"])
        return allowed or set(available)

    @staticmethod
    def _conditional(rule: dict[str, Any], available: set[str], output: str | None) -> set[str]:
        text = output or ""
        try:
            parsed = json.loads(text)
            if isinstance(parsed, dict):
                text = str(parsed.get("message", ""))
        except ValueError:
            pass
        for key, tool in rule["child_output_mapping"].items():
            if _matches(text, key):
                return {tool}
        default = rule.get("default_child")
        return {default} if default else set(available)

    def forces_tool_call(self) -> bool:
        return not self.history and bool(self._of("run_first"))

    def record(self, tool_name: str) -> None:
        self.history.append(tool_name)

    def is_terminal(self, name: str) -> bool:
        return any(r["tool_name"] == name for r in self._of("exit_loop"))

    def continues(self, name: str) -> bool:
        return any(
            r["tool_name"] == name for r in self._of("continue_loop", "constrain_child_tools")
        )

    def requires_approval(self, name: str) -> bool:
        return any(r["tool_name"] == name for r in self._of("requires_approval"))

    def uncalled_required(self, available: set[str]) -> list[str]:
        required = {r["tool_name"] for r in self._of("required_before_exit")} & available
        return sorted(required - set(self.history))

    def prompt(self) -> str:
        """The `<tool_usage_rules>` text appended to the system prompt ("" without rules)."""
        lines = []
        for r in self.rules:
            name = r["tool_name"]
            if r["type"] == "constrain_child_tools":
                lines.append(
                    f"After using {name}, you must use one of these tools: "
                    f"{', '.join(r['children'])}"
                )
            elif r["type"] == "parent_last_tool":
                lines.append(f"{', '.join(r['children'])} can only be used after {name}")
            elif r["type"] == "conditional":
                lines.append(f"{name} will determine which tool to use next based on its output")
            elif r["type"] == "exit_loop":
                lines.append(f"{name} ends your response (yields control) when called")
            elif r["type"] == "continue_loop":
                lines.append(f"{name} requires continuing your response when called")
            elif r["type"] == "max_count_per_step":
                lines.append(f"{name}: at most {r['max_count_limit']} use(s) per response")
            elif r["type"] == "required_before_exit":
                lines.append(f"{name} must be called before ending the conversation")
        if not lines:
            return ""
        body = "\n".join(f"<tool_rule>\n{line}\n</tool_rule>" for line in lines)
        return (
            "\n\n<tool_usage_rules>\nThe following constraints define rules for tool usage and "
            "guide desired behavior. These rules must be followed to ensure proper tool execution "
            f"and workflow. A single response may contain multiple tool calls.\n\n{body}\n"
            "</tool_usage_rules>"
        )
