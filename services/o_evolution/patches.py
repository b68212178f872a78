"""Checking and applying a patch to an agent version, and the diff between two versions.

`check_patch` holds the refusal rules: it is cheap and pure, so a proposal that could never
be accepted is refused before any model is paid to evaluate it. `apply_patch` checks, then
applies the ops in order and refuses what only the text can tell (an edit whose anchor is
missing or ambiguous, a patch that grows the prompt too much). Nothing here does I/O.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from o_contracts.evolution import (
    MODEL_SETTING_KEYS,
    PROTECTED_BLOCKS,
    AddTool,
    AddToolRule,
    AppendText,
    EvolutionConfig,
    FieldDiff,
    MutableField,
    Patch,
    PatchOp,
    RemoveTool,
    RemoveToolRule,
    ReplaceText,
    SetModelSetting,
    VersionSpec,
)
from o_contracts.text_edits import TextEditRefused, apply_text_edit
from o_contracts.tool_rules import InvalidToolRule, validate_rules

# Words that name the evaluator or evolution's own configuration: a patch that could change
# how it is judged could grade itself, so none may reach them.
_OFF_LIMITS = ("evolution", "judge", "config")
_OFF_LIMITS_REASON = (
    "the evaluator and evolution's configuration are outside what a patch may change"
)

_REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
# (low, high) for the numeric settings, as the providers accept them.
_SETTING_RANGES = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "frequency_penalty": (-2.0, 2.0)}


class PatchRefused(ValueError):
    """A patch evolution may not apply; `reason` says which op and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def field_of(op: PatchOp) -> MutableField:
    """The part of a version an op changes."""
    if isinstance(op, ReplaceText | AppendText):
        return "system" if op.target == "system" else "blocks"
    if isinstance(op, AddTool | RemoveTool):
        return "tools"
    if isinstance(op, AddToolRule | RemoveToolRule):
        return "tool_rules"
    return "model_settings"


def check_patch(
    spec: VersionSpec, patch: Patch, config: EvolutionConfig, known_tools: Collection[str]
) -> None:
    """Refuse (PatchRefused) a patch the configuration does not allow on this version."""
    if len(patch.ops) > config.max_ops:
        raise PatchRefused(f"the patch has {len(patch.ops)} ops; at most {config.max_ops} allowed")
    # Tools and rules as the ops before each one leave them, so an op is checked in its place.
    tools = set(spec.tools)
    rules = [_canonical(rule) for rule in spec.tool_rules]
    for i, op in enumerate(patch.ops):
        where = f"ops[{i}] ({op.op})"
        _check_off_limits(op, where)
        if isinstance(op, ReplaceText | AppendText):
            _check_target(spec, config, op.target, where)
        field = field_of(op)
        if field not in config.mutable:
            raise PatchRefused(f"{where}: '{field}' is not among the fields evolution may change")
        if isinstance(op, AddTool):
            if op.name not in known_tools:
                raise PatchRefused(f"{where}: no tool named '{op.name}' exists")
            if op.name in tools:
                raise PatchRefused(f"{where}: tool '{op.name}' is already attached")
            tools.add(op.name)
        elif isinstance(op, RemoveTool):
            if op.name not in tools:
                raise PatchRefused(f"{where}: tool '{op.name}' is not attached")
            tools.discard(op.name)
        elif isinstance(op, AddToolRule):
            try:
                validate_rules([op.rule])
            except InvalidToolRule as e:
                raise PatchRefused(f"{where}: {e}") from None
            if _canonical(op.rule) in rules:
                raise PatchRefused(f"{where}: the rule {_canonical(op.rule)} is already present")
            rules.append(_canonical(op.rule))
        elif isinstance(op, RemoveToolRule):
            if _canonical(op.rule) not in rules:
                raise PatchRefused(f"{where}: the rule {_canonical(op.rule)} is not present")
            rules.remove(_canonical(op.rule))
        elif isinstance(op, SetModelSetting):
            _check_setting(op, where)


def _check_off_limits(op: PatchOp, where: str) -> None:
    if isinstance(op, ReplaceText | AppendText):
        named = op.target
    elif isinstance(op, SetModelSetting):
        named = op.key
    elif isinstance(op, AddTool):
        # A tool that could reach evolution's settings would let the agent change its judge.
        named = op.name
    else:
        return
    if any(word in named.lower() for word in _OFF_LIMITS):
        raise PatchRefused(f"{where} on '{named}': {_OFF_LIMITS_REASON}")


def _check_target(spec: VersionSpec, config: EvolutionConfig, target: str, where: str) -> None:
    if target == "system":
        return
    label = target.removeprefix("block:")
    if not target.startswith("block:") or not label:
        raise PatchRefused(f"{where}: target '{target}' is neither 'system' nor 'block:<label>'")
    if label in PROTECTED_BLOCKS:
        raise PatchRefused(
            f"{where}: block '{label}' is protected: evolution never changes facts about the user"
        )
    if label not in config.evolvable_blocks:
        raise PatchRefused(f"{where}: block '{label}' is not among the evolvable blocks")
    if label not in spec.blocks:
        raise PatchRefused(f"{where}: this version has no block '{label}'")


def _check_setting(op: SetModelSetting, where: str) -> None:
    key, value = op.key, op.value
    if key not in MODEL_SETTING_KEYS:
        raise PatchRefused(
            f"{where}: '{key}' is not a model setting a patch may set"
            f" (one of: {', '.join(MODEL_SETTING_KEYS)})"
        )
    if value is None:
        return
    if key in _SETTING_RANGES:
        low, high = _SETTING_RANGES[key]
        if not isinstance(value, int | float) or not low <= value <= high:
            raise PatchRefused(f"{where}: {key} must be a number from {low} to {high}")
    elif key == "max_tokens":
        if not isinstance(value, int) or value < 1:
            raise PatchRefused(f"{where}: max_tokens must be a positive integer")
    elif value not in _REASONING_EFFORTS:
        efforts = ", ".join(_REASONING_EFFORTS)
        raise PatchRefused(f"{where}: reasoning_effort must be one of {efforts}")


def apply_patch(
    spec: VersionSpec, patch: Patch, config: EvolutionConfig, known_tools: Collection[str]
) -> VersionSpec:
    """The version the patch makes of `spec`; PatchRefused if it may not be applied."""
    check_patch(spec, patch, config, known_tools)
    texts = {"system": spec.system} | {f"block:{k}": v for k, v in spec.blocks.items()}
    tools = set(spec.tools)
    rules = [dict(rule) for rule in spec.tool_rules]
    settings = dict(spec.model_settings)
    for i, op in enumerate(patch.ops):
        where = f"ops[{i}] ({op.op})"
        if isinstance(op, ReplaceText | AppendText):
            try:
                texts[op.target] = apply_text_edit(texts[op.target], op, where)
            except TextEditRefused as e:
                raise PatchRefused(e.reason) from None
        elif isinstance(op, AddTool):
            tools.add(op.name)
        elif isinstance(op, RemoveTool):
            tools.discard(op.name)
        elif isinstance(op, AddToolRule):
            rules.append(dict(op.rule))
        elif isinstance(op, RemoveToolRule):
            rules = [r for r in rules if _canonical(r) != _canonical(op.rule)]
        elif op.value is None:
            settings.pop(op.key, None)
        else:
            settings[op.key] = op.value
    try:
        # A rule may be valid alone and conflict with another (exit_loop and continue_loop).
        validate_rules(rules)
    except InvalidToolRule as e:
        raise PatchRefused(f"the patched tool rules are invalid: {e}") from None
    child = VersionSpec(
        system=texts["system"],
        blocks={label: texts[f"block:{label}"] for label in spec.blocks},
        tools=sorted(tools),
        tool_rules=rules,
        model_settings=settings,
    )
    growth = _text_size(child) - _text_size(spec)
    if growth > config.max_growth_chars:
        raise PatchRefused(
            f"the patch adds {growth} characters to the system prompt and blocks;"
            f" at most {config.max_growth_chars} allowed"
        )
    return child


def _text_size(spec: VersionSpec) -> int:
    return len(spec.system) + sum(len(value) for value in spec.blocks.values())


def _canonical(rule: Mapping[str, Any]) -> str:
    return json.dumps(rule, sort_keys=True, separators=(",", ":"))


def diff(parent: VersionSpec, child: VersionSpec) -> list[FieldDiff]:
    """The fields that differ from `parent` to `child`, each as a unified diff."""
    pairs: list[tuple[str, list[str], list[str]]] = [
        ("system", parent.system.split("\n"), child.system.split("\n"))
    ]
    for label in sorted(parent.blocks.keys() | child.blocks.keys()):
        before, after = parent.blocks.get(label), child.blocks.get(label)
        pairs.append(
            (
                f"block:{label}",
                [] if before is None else before.split("\n"),
                [] if after is None else after.split("\n"),
            )
        )
    pairs += [
        ("tools", parent.tools, child.tools),
        (
            "tool_rules",
            [_canonical(r) for r in parent.tool_rules],
            [_canonical(r) for r in child.tool_rules],
        ),
        ("model_settings", _json_lines(parent.model_settings), _json_lines(child.model_settings)),
    ]
    parent_id, child_id = parent.version_id, child.version_id
    diffs = []
    for field, before_lines, after_lines in pairs:
        if before_lines == after_lines:
            continue
        lines = difflib.unified_diff(
            before_lines, after_lines, fromfile=parent_id, tofile=child_id, lineterm=""
        )
        diffs.append(FieldDiff(field=field, unified="\n".join(lines) + "\n"))
    return diffs


def _json_lines(value: Mapping[str, Any]) -> list[str]:
    # One key per line, sorted, so a changed setting is one changed line.
    return json.dumps(value, sort_keys=True, indent=2).split("\n")


def spec_from_agent(
    system: str,
    blocks: Mapping[str, str],
    tools: Iterable[str],
    tool_rules: Iterable[Mapping[str, Any]],
    llm_config: Mapping[str, Any],
    config: EvolutionConfig,
) -> VersionSpec:
    """An agent's current version: its evolvable blocks and the model settings a patch may set."""
    return VersionSpec(
        system=system,
        blocks={
            label: value
            for label, value in blocks.items()
            if label in config.evolvable_blocks and label not in PROTECTED_BLOCKS
        },
        tools=sorted(tools),
        tool_rules=[dict(rule) for rule in tool_rules],
        model_settings={
            key: llm_config[key] for key in MODEL_SETTING_KEYS if llm_config.get(key) is not None
        },
    )
