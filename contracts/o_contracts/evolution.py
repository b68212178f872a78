"""Agent versions, the patches evolution proposes, and evolution's per-agent configuration.

A version is a content-addressed snapshot of what evolution may change about an agent
(issue 14): its system prompt, its evolvable blocks, its tools and tool rules, a few model
settings. Evolution never rewrites a version: it proposes a `Patch`, a short list of
itemised edits (as ACE's curator does), so every change can be read, checked and undone.
The checks and the application live in `o_evolution/patches.py`; these are the values
that travel in events.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Annotated, Any, Literal, get_args

from pydantic import Field, field_validator

from o_contracts.models import Value

MutableField = Literal["system", "blocks", "tools", "tool_rules", "model_settings"]
MUTABLE_FIELDS: tuple[MutableField, ...] = get_args(MutableField)

# The model settings a patch may set (keys of the agent's llm_config).
MODEL_SETTING_KEYS = ("temperature", "max_tokens", "reasoning_effort", "frequency_penalty", "top_p")

# Blocks holding facts about the user: evolution never changes them, whatever is configured.
PROTECTED_BLOCKS = ("human",)

# A patch may add at most this many ops, whatever the configuration says.
MAX_PATCH_OPS = 20


class VersionSpec(Value):
    """What evolution may change about an agent, as one content-addressed value."""

    system: str
    # label -> value, only the agent's evolvable blocks.
    blocks: dict[str, str] = Field(default_factory=dict)
    tools: list[str] = Field(default_factory=list)
    # Letta tool rules as JSON objects ({"type": ..., "tool_name": ..., ...}).
    tool_rules: list[dict[str, Any]] = Field(default_factory=list)
    model_settings: dict[str, Any] = Field(default_factory=dict)

    @field_validator("tools")
    @classmethod
    def _sorted_tools(cls, tools: list[str]) -> list[str]:
        # Sorted and unique, so the same tool set always has the same version id.
        return sorted(set(tools))

    @property
    def version_id(self) -> str:
        """ "version-" and 40 hex digits of the SHA-256 of the spec's canonical JSON."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return "version-" + hashlib.sha256(canonical.encode()).hexdigest()[:40]


class ServedVersion(Value):
    """Which arm of a canary rollout a live run took (RunStarted.version): the
    candidate's version or the stable agent, and at what weight it was chosen."""

    rollout_id: str
    arm: Literal["candidate", "stable"]
    version_id: str
    # The candidate's share of traffic, in percent, when the run started.
    weight: float


# Patch operations. A text op's target is "system" or "block:<label>".


class ReplaceText(Value):
    op: Literal["replace_text"] = "replace_text"
    target: str
    # Must occur exactly once in the target, so the edit says unambiguously where it goes.
    old: str = Field(min_length=1)
    new: str


class AppendText(Value):
    op: Literal["append_text"] = "append_text"
    target: str
    text: str = Field(min_length=1)


class AddTool(Value):
    op: Literal["add_tool"] = "add_tool"
    name: str


class RemoveTool(Value):
    op: Literal["remove_tool"] = "remove_tool"
    name: str


class AddToolRule(Value):
    op: Literal["add_tool_rule"] = "add_tool_rule"
    rule: dict[str, Any]


class RemoveToolRule(Value):
    op: Literal["remove_tool_rule"] = "remove_tool_rule"
    rule: dict[str, Any]


class SetModelSetting(Value):
    op: Literal["set_model_setting"] = "set_model_setting"
    key: str
    # None removes the setting (the provider's default applies).
    value: float | int | str | None

    @field_validator("value", mode="before")
    @classmethod
    def _not_a_bool(cls, value: Any) -> Any:
        # pydantic would read true as 1.0; no model setting a patch may set is a switch.
        if isinstance(value, bool):
            raise ValueError("a model setting is a number, a string or null, not true or false")
        return value


PatchOp = Annotated[
    ReplaceText
    | AppendText
    | AddTool
    | RemoveTool
    | AddToolRule
    | RemoveToolRule
    | SetModelSetting,
    Field(discriminator="op"),
]


class Patch(Value):
    """Itemised edits to a version, applied in order."""

    ops: list[PatchOp] = Field(min_length=1, max_length=MAX_PATCH_OPS)
    rationale: str = ""


class FieldDiff(Value):
    """One changed field between two versions, as a unified diff."""

    # "system", "block:<label>", "tools", "tool_rules" or "model_settings".
    field: str
    unified: str


class EvolutionConfig(Value):
    """How an agent may evolve: what may change, how fast, at what cost, with whose approval."""

    enabled: bool = False
    mode: Literal["propose_only", "shadow", "canary", "auto"] = "shadow"
    evolvable_blocks: list[str] = Field(default_factory=lambda: ["persona"])
    mutable: list[MutableField] = Field(default_factory=lambda: list(MUTABLE_FIELDS))
    # Changing the source of users' tools: off unless enabled, and then always approved by a person.
    allow_tool_source: bool = False
    approval_before_canary: bool = True
    approval_before_promotion: bool = False
    cases_per_evaluation: int = Field(default=30, ge=1, le=200)
    # Limits of every shadow instance: a case over one is inconclusive, never a win.
    shadow_case_seconds: float = Field(default=120.0, gt=0)
    shadow_case_tokens: int = Field(default=50_000, ge=1)
    # An evaluation still undecided after this long is rejected as inconclusive.
    shadow_experiment_seconds: float = Field(default=3600.0, gt=0)
    max_votes_per_conversation: int = Field(default=3, ge=1)
    # Percent of traffic the candidate takes at each canary step.
    canary_steps: list[int] = Field(default_factory=lambda: [5, 25, 50, 100])
    # Canary runs between analyses.
    analysis_every: int = Field(default=10, ge=1)
    # Live candidate runs the judge compares with the stable agent at each analysis.
    canary_judge_samples: int = Field(default=2, ge=0, le=20)
    # A canary error rate at or above this aborts the canary at once.
    failure_limit: float = Field(default=0.5, gt=0, le=1)
    min_seconds_between_proposals: int = Field(default=3600, ge=0)
    tokens_per_day: int = Field(default=1_000_000, ge=0)
    # The agent's own evolution tools (base_tools.EVOLUTION_TOOLS): its sleep-time companion
    # has them whenever evolution is on; the agent itself only with this.
    tools_for_agent: bool = False
    # Proposals the agent (or its companion) may make through its tool per day.
    agent_proposals_per_day: int = Field(default=3, ge=0)
    # Whether the agent's own rollback needs an operator (by default it may return to a
    # version once served, always recorded).
    agent_rollback_needs_approval: bool = False
    max_ops: int = Field(default=10, ge=1, le=MAX_PATCH_OPS)
    # How many characters a patch may add to the system prompt and blocks together.
    max_growth_chars: int = Field(default=2000, ge=0)

    @field_validator("evolvable_blocks")
    @classmethod
    def _no_protected_blocks(cls, labels: list[str]) -> list[str]:
        for label in labels:
            if label in PROTECTED_BLOCKS:
                raise ValueError(
                    f"block '{label}' cannot be evolvable:"
                    " evolution never changes facts about the user"
                )
        return labels

    @field_validator("canary_steps")
    @classmethod
    def _canary_steps_rise_to_100(cls, steps: list[int]) -> list[int]:
        if not steps:
            raise ValueError("canary_steps must list at least one step")
        for step in steps:
            if not 1 <= step <= 100:
                raise ValueError(f"canary step {step} is not a percent between 1 and 100")
        for before, after in itertools.pairwise(steps):
            if after <= before:
                raise ValueError(f"canary_steps must strictly increase ({before} then {after})")
        if steps[-1] != 100:
            raise ValueError(f"canary_steps must end at 100 (full traffic), not {steps[-1]}")
        return steps
