"""Evolution decisions: an agent's proposed changes, their shadow evaluation, and which
version it serves. Appended only by the evolution service, on the agent's evolution
subject (`o.evt.evolution.<agent_id>`), one after the other (expected sequence).

Every decision carries the hash of the one before it (`prev_hash`) and its own `hash`
over its content (o_evolution/chain.py), so a decision changed, removed or slipped in
afterwards breaks the chain where it happened: `GET /v1/agents/{id}/evolution/verify`
names the first broken link. The hash covers the decision, never the envelope's clock,
so the same log and the same model answers give the same hashes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Self

from pydantic import Field

from o_contracts.base import Event
from o_contracts.evolution import EvolutionConfig, Patch, VersionSpec
from o_contracts.experiments import ArmStats, CaseResult, GateReport
from o_contracts.text_edits import TextEdit

ProposalSource = Literal["operator", "agent", "sleeptime"]
RequestedBy = Literal["operator", "agent"]


class EvolutionDecided(Event):
    """Base of every decision on an agent's evolution subject."""

    abstract: ClassVar[bool] = True

    agent_id: str
    prev_hash: str = ""
    hash: str = ""

    def chain_payload(self) -> dict[str, Any]:
        """What the hash covers: the type and every field but the hash itself."""
        return {"type": self.type_name(), **self.model_dump(mode="json", exclude={"hash"})}

    def chained(self, prev_hash: str, link_hash: Any) -> Self:
        """This decision linked after `prev_hash` (link_hash: o_evolution.chain.link_hash)."""
        linked = self.model_copy(update={"prev_hash": prev_hash, "hash": ""})
        return linked.model_copy(update={"hash": link_hash(prev_hash, linked.chain_payload())})


class EvolutionConfigured(EvolutionDecided):
    config: EvolutionConfig


class ChangeProposed(EvolutionDecided):
    """A patch to the agent's current version, with the version it makes (not yet served)."""

    proposal_id: str
    source: ProposalSource
    parent_version: str
    candidate_version: str
    parent: VersionSpec
    candidate: VersionSpec
    patch: Patch
    # The runs whose digest motivated it (empty for an operator's patch).
    run_ids: list[str] = Field(default_factory=list)
    tokens: int = 0


class ProposalRefused(EvolutionDecided):
    """A patch refused before anything was spent on it (protected field, limits)."""

    proposal_id: str
    source: ProposalSource
    reason: str
    patch: Patch | None = None


class EvaluationStarted(EvolutionDecided):
    """The proposal's shadow evaluation began (one at a time per agent)."""

    proposal_id: str


class CaseEvaluated(EvolutionDecided):
    """One recorded run replayed in the shadow under parent and candidate, and judged.

    Recorded as soon as it is done: an evaluation that resumes after a crash starts
    at the next case and never asks a recorded case's model calls again.
    """

    proposal_id: str
    n: int
    case: CaseResult
    tokens: int = 0


class CandidateEvaluated(EvolutionDecided):
    """The gate's decision on a proposal's cases (accepted or rejected, and why)."""

    proposal_id: str
    report: GateReport


class ProposalApproved(EvolutionDecided):
    proposal_id: str
    note: str = ""


class ProposalRejected(EvolutionDecided):
    proposal_id: str
    reason: str


class VersionPromoted(EvolutionDecided):
    """The agent now serves `version_id` (its configuration and evolvable blocks)."""

    proposal_id: str | None = None
    version_id: str
    spec: VersionSpec
    previous_version: str


def _unset(value: object) -> bool:
    return value is None


class VersionRolledBack(EvolutionDecided):
    """The agent serves an earlier version again, from the next request on."""

    version_id: str
    spec: VersionSpec
    previous_version: str
    requested_by: RequestedBy = "operator"
    reason: str = ""
    # What it did to the agent's evolvable blocks, by label: the edits it made, and the
    # edits that take them back (the changes it took back, made again; a label's None: not
    # known), so that a later rollback across this one takes back exactly what it did and
    # keeps every memory edit since. Absent from rollbacks recorded before they were kept
    # (and then out of the hash, which stays what it was): those are taken back by text.
    made: dict[str, list[TextEdit]] | None = Field(default=None, exclude_if=_unset)
    taken_back: dict[str, list[TextEdit] | None] | None = Field(default=None, exclude_if=_unset)


class RolloutStarted(EvolutionDecided):
    """A canary: the candidate takes `weight` percent of conversations, the stable agent
    the rest, until analysis advances it step by step to 100 or aborts it."""

    proposal_id: str
    rollout_id: str
    version_id: str
    spec: VersionSpec
    stable_version: str
    weight: float
    steps: list[int]


class RolloutAdvanced(EvolutionDecided):
    """The analysis at the current weight passed: the candidate takes `weight` now."""

    proposal_id: str
    rollout_id: str
    weight: float
    previous_weight: float
    stable: ArmStats
    candidate: ArmStats
    reason: str


class RolloutCompleted(EvolutionDecided):
    """The candidate passed the analysis at full traffic: it is ready to be promoted
    (at once, or when a person approves, with approval_before_promotion)."""

    proposal_id: str
    rollout_id: str
    stable: ArmStats
    candidate: ArmStats
    reason: str


class RolloutAborted(EvolutionDecided):
    """The canary is over: every conversation is back on the stable agent at once."""

    proposal_id: str
    rollout_id: str
    weight: float
    reason: str
    by: Literal["analysis", "operator", "rollback"]
    stable: ArmStats | None = None
    candidate: ArmStats | None = None


class EvolutionToolCalled(EvolutionDecided):
    """An agent called one of its evolution tools (a report, its status, a proposal, a
    rollback): who, with what, and what it was answered. Its effects (ChangeProposed,
    VersionRolledBack) are decisions of their own."""

    caller_agent_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    ok: bool
    result: str


class EvolutionBudgetExhausted(EvolutionDecided):
    """Evolution stops for the agent until the budget renews; user runs are untouched."""

    reason: str
