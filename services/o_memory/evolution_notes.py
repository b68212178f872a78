"""Evolution decisions as archival passages: the text an agent reads about its own evolution.

Every decision on an agent's evolution subject (o_contracts/events/evolution.py) is
also kept in its archival memory, tagged `evolution` (evolution_archive.py does the
I/O), so the agent finds its own history with `archival_memory_search` and can reflect
on it: which change was proposed and by whom, what the gate or a reviewer decided and
why, which version it serves now. This module only writes the text.

One function per decision type, registered with `@renders`. A type without one (a
decision added to the contracts later) gets a generic rendering from its class name and
fields, so no decision is ever left out; giving it a better text is one small function.

Texts name the ids (proposal, version), so a search for one finds every decision about
it, and quote the patch's own words (shortened), so one passage read alone says what
was tried. Each note carries an importance (1-10, the memory stream's scale) chosen
here instead of asking the agent's model: outcomes that changed or refused a change
matter more than bookkeeping, and the archive of a busy agent costs no model calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, assert_never

from o_contracts.events import (
    CandidateEvaluated,
    CaseEvaluated,
    ChangeProposed,
    EvaluationStarted,
    EvolutionBudgetExhausted,
    EvolutionConfigured,
    EvolutionToolCalled,
    ProposalApproved,
    ProposalRefused,
    ProposalRejected,
    VersionPromoted,
    VersionRolledBack,
)
from o_contracts.events.evolution import EvolutionDecided
from o_contracts.evolution import (
    AddTool,
    AddToolRule,
    AppendText,
    Patch,
    PatchOp,
    RemoveTool,
    RemoveToolRule,
    ReplaceText,
    SetModelSetting,
)
from o_contracts.experiments import GateReport, SliceResult

TAG = "evolution"
# Decisions kept out of the archive: one passage per shadow case (30 per evaluation)
# would bury the decisions; the gate's decision (CandidateEvaluated) carries their tally.
# EvaluationStarted only marks progress; its outcome is the CandidateEvaluated. An agent's
# own tool calls: their effects (a proposal, a rollback) are archived as decisions; a
# report or status read each turn would bury them.
NOT_ARCHIVED: frozenset[str] = frozenset(
    {CaseEvaluated.type_name(), EvaluationStarted.type_name(), EvolutionToolCalled.type_name()}
)
# Quoted patch text and field values are shortened to this many characters.
QUOTE_CHARS = 200
# Edits of one patch named before "and N more edits".
SHOWN_OPS = 5
# Slices of a gate report listed (the regressed ones first) before "and N more".
SHOWN_SLICES = 8
DEFAULT_IMPORTANCE = 5
# Fields every decision has that say nothing to the agent.
_CHAIN_FIELDS = ("agent_id", "prev_hash", "hash")


@dataclass(frozen=True)
class Proposal:
    """A proposal as the evolution service recorded it: who proposed which patch."""

    proposal_id: str
    source: str
    patch: Patch | None = None


@dataclass(frozen=True)
class Context:
    """What a decision names only by id, as the log had it at the decision."""

    # The decision's own proposal (None when it names none, or none was found).
    proposal: Proposal | None = None
    # The proposal that made the version a rollback stops serving.
    undone: Proposal | None = None


@dataclass(frozen=True)
class Note:
    text: str
    importance: int


D = TypeVar("D", bound=EvolutionDecided)
Render = Callable[[D, Context], Note]
_RENDERERS: dict[str, Callable[[Any, Context], Note]] = {}


def renders(event_type: type[D]) -> Callable[[Render[D]], Render[D]]:
    """Register the text of one decision type."""

    def register(fn: Render[D]) -> Render[D]:
        _RENDERERS[event_type.type_name()] = fn
        return fn

    return register


def note_for(decision: EvolutionDecided, context: Context) -> Note | None:
    """The passage for `decision`; None for a decision kept out of the archive."""
    if decision.type_name() in NOT_ARCHIVED:
        return None
    return _RENDERERS.get(decision.type_name(), generic)(decision, context)


# Phrases.


def shortened(text: str, limit: int = QUOTE_CHARS) -> str:
    """`text` on one line, cut to `limit` characters (an ellipsis says it was)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def quoted(text: str, limit: int = QUOTE_CHARS) -> str:
    return f"'{shortened(text, limit)}'"


def sentence(text: str) -> str:
    """`text` ending as a sentence (reasons sometimes bring their own full stop)."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."


def joined(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def counted(n: int, noun: str) -> str:
    """'1 win', '2 wins', '1 loss', '0 losses'."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun}{'es' if noun.endswith('s') else 's'}"


def _target(target: str) -> str:
    kind, _, label = target.partition(":")
    return f"block {label}" if kind == "block" and label else target


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return quoted(value)
    return shortened(json.dumps(value, sort_keys=True, separators=(", ", ": "), ensure_ascii=False))


def op_phrase(op: PatchOp) -> str:
    if isinstance(op, AppendText):
        return f"append to {_target(op.target)} {quoted(op.text)}"
    if isinstance(op, ReplaceText):
        return f"replace {quoted(op.old)} with {quoted(op.new)} in {_target(op.target)}"
    if isinstance(op, AddTool):
        return f"add tool {op.name}"
    if isinstance(op, RemoveTool):
        return f"remove tool {op.name}"
    if isinstance(op, AddToolRule):
        return f"add tool rule {_compact(op.rule)}"
    if isinstance(op, RemoveToolRule):
        return f"remove tool rule {_compact(op.rule)}"
    if isinstance(op, SetModelSetting):
        if op.value is None:
            return f"reset {op.key} to the provider's default"
        return f"set {op.key} to {op.value}"
    assert_never(op)


def patch_phrase(patch: Patch) -> str:
    """'append to system '...' and add tool x' (the first SHOWN_OPS edits)."""
    shown = [op_phrase(op) for op in patch.ops[:SHOWN_OPS]]
    hidden = len(patch.ops) - len(shown)
    if hidden:
        shown.append(f"{hidden} more edit{'s' if hidden > 1 else ''}")
    return joined(shown)


def proposal_phrase(proposal_id: str, proposal: Proposal | None) -> str:
    """'proposal proposal-x (source: agent) to append to system '...''."""
    if proposal is None:
        return f"proposal {proposal_id}"
    phrase = f"proposal {proposal_id} (source: {proposal.source})"
    if proposal.patch is not None:
        phrase += f" to {patch_phrase(proposal.patch)}"
    return phrase


def rationale(proposal: Proposal | None) -> str:
    """' Rationale: ...' when the patch gave one, else ''."""
    if proposal is None or proposal.patch is None or not proposal.patch.rationale.strip():
        return ""
    return f" Rationale: {sentence(shortened(proposal.patch.rationale, 2 * QUOTE_CHARS))}"


def _tally(wins: int, losses: int, ties: int) -> list[str]:
    return [counted(wins, "win"), counted(losses, "loss"), counted(ties, "tie")]


def slice_phrase(s: SliceResult) -> str:
    tally = [counted(s.cases, "case"), *_tally(s.wins, s.losses, s.ties)]
    phrase = f"{s.name}: {', '.join(tally)}"
    if s.regressed:
        phrase += ", regressed"
    if s.p_value is not None:
        phrase += f" (p = {s.p_value:.3f})"
    return phrase


def slice_table(slices: list[SliceResult]) -> str:
    """The slices, the regressed first, then the largest; '' without slices."""
    if not slices:
        return ""
    ordered = sorted(slices, key=lambda s: (not s.regressed, -s.cases))
    shown = [slice_phrase(s) for s in ordered[:SHOWN_SLICES]]
    hidden = len(ordered) - len(shown)
    if hidden:
        shown.append(f"and {hidden} more")
    return f" Slices: {'; '.join(shown)}."


def gate_summary(report: GateReport) -> str:
    """The tally, the slice table and the cost and time ratios, after the reason."""
    tally = [
        *_tally(report.wins, report.losses, report.ties),
        f"{report.inconclusive} inconclusive",
    ]
    text = f" Cases: {', '.join(tally)}."
    text += slice_table(report.slices)
    ratios = []
    if report.cost_ratio is not None:
        ratios.append(f"{report.cost_ratio:.2f}x the parent's tokens")
    if report.latency_ratio is not None:
        ratios.append(f"{report.latency_ratio:.2f}x its time")
    if ratios:
        text += f" The candidate used {joined(ratios)}."
    return text


# One text per decision type.


@renders(EvolutionConfigured)
def configured(e: EvolutionConfigured, _: Context) -> Note:
    c = e.config
    if not c.enabled:
        return Note(
            "Evolution: evolution was turned off; no change is proposed, evaluated or"
            " promoted until it is turned on again.",
            4,
        )
    return Note(
        f"Evolution: evolution is on (mode {c.mode}). Patches may change"
        f" {joined(list(c.mutable)) or 'nothing'}; evolvable blocks:"
        f" {', '.join(c.evolvable_blocks) or 'none'}; at most {c.max_ops} edits and"
        f" {c.max_growth_chars} added characters per patch; {c.cases_per_evaluation}"
        f" recorded runs per evaluation; approval before promotion:"
        f" {'yes' if c.approval_before_promotion else 'no'}.",
        4,
    )


@renders(ChangeProposed)
def proposed(e: ChangeProposed, _: Context) -> Note:
    proposal = Proposal(e.proposal_id, e.source, e.patch)
    runs = f", drawn from {len(e.run_ids)} recent runs" if e.run_ids else ""
    return Note(
        f"Evolution: {proposal_phrase(e.proposal_id, proposal)} was proposed{runs}. It"
        f" would make version {e.candidate_version} from version {e.parent_version}, served"
        f" only once evaluated and promoted.{rationale(proposal)}",
        4,
    )


@renders(ProposalRefused)
def refused(e: ProposalRefused, _: Context) -> Note:
    proposal = Proposal(e.proposal_id, e.source, e.patch)
    return Note(
        f"Evolution: {proposal_phrase(e.proposal_id, proposal)} was refused before"
        f" evaluation: {sentence(e.reason)}{rationale(proposal)}",
        6,
    )


_VERDICTS = {
    "accepted": "was accepted by the gate",
    "rejected": "was rejected by the gate",
    "continue": "was left undecided by the gate",
}


@renders(CandidateEvaluated)
def evaluated(e: CandidateEvaluated, c: Context) -> Note:
    report = e.report
    return Note(
        f"Evolution: {proposal_phrase(e.proposal_id, c.proposal)}"
        f" {_VERDICTS[report.decision]}: {sentence(report.reason)}"
        f"{gate_summary(report)}{rationale(c.proposal)}",
        6 if report.decision == "accepted" else 7,
    )


@renders(ProposalApproved)
def approved(e: ProposalApproved, c: Context) -> Note:
    note = f": {sentence(e.note)}" if e.note.strip() else "."
    return Note(
        f"Evolution: {proposal_phrase(e.proposal_id, c.proposal)} was approved by a reviewer"
        f"{note}{rationale(c.proposal)}",
        5,
    )


@renders(ProposalRejected)
def rejected(e: ProposalRejected, c: Context) -> Note:
    return Note(
        f"Evolution: {proposal_phrase(e.proposal_id, c.proposal)} was rejected by a reviewer:"
        f" {sentence(e.reason)}{rationale(c.proposal)}",
        7,
    )


@renders(VersionPromoted)
def promoted(e: VersionPromoted, c: Context) -> Note:
    what = (
        proposal_phrase(e.proposal_id, c.proposal)
        if e.proposal_id is not None
        else f"version {e.version_id}"
    )
    return Note(
        f"Evolution: {what} was promoted: version {e.version_id} is served from the next"
        f" request on, replacing version {e.previous_version}.{rationale(c.proposal)}",
        7,
    )


@renders(VersionRolledBack)
def rolled_back(e: VersionRolledBack, c: Context) -> Note:
    undone = ""
    if c.undone is not None:
        undone = (
            f" That version came from {proposal_phrase(c.undone.proposal_id, c.undone)};"
            " that change is undone."
        )
    who = "the agent itself" if e.requested_by == "agent" else "an operator"
    why = f": {e.reason.rstrip('.')}." if e.reason else " (no reason given)."
    return Note(
        f"Evolution: rolled back to version {e.version_id}, served from the next request on,"
        f" replacing version {e.previous_version}.{undone} Asked for by {who}{why}",
        8,
    )


@renders(EvolutionBudgetExhausted)
def budget_exhausted(e: EvolutionBudgetExhausted, _: Context) -> Note:
    return Note(
        f"Evolution: evolution stopped until its budget renews: {sentence(e.reason)}"
        " Conversations are not affected.",
        5,
    )


def _words(class_name: str) -> str:
    """'RolloutStarted' -> 'Rollout started'."""
    words = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", class_name)
    return " ".join([words[0], *(w.lower() for w in words[1:])]) if words else class_name


def generic(e: EvolutionDecided, c: Context) -> Note:
    """A decision without a text of its own: its name, its proposal, its fields."""
    fields = e.model_dump(mode="json", exclude=set(_CHAIN_FIELDS))
    proposal_id = fields.pop("proposal_id", None)
    about = f" ({proposal_phrase(proposal_id, c.proposal)})" if proposal_id else ""
    details = "; ".join(f"{k.replace('_', ' ')}: {_compact(v)}" for k, v in fields.items())
    return Note(
        f"Evolution: {_words(type(e).__name__)}{about}." + (f" {details}." if details else ""),
        DEFAULT_IMPORTANCE,
    )
