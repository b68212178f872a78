"""The load's proposals (`propose <token>` requests): what the API shows of each agent's
evolution, and what an acknowledged proposal must be.

A proposal request posts a patch appending its token to the agent's `persona` with an
`Idempotency-Key` (docs/evolution.md); each chaos agent evolves in mode `shadow`, so the
proposal is evaluated at once on the agent's recorded runs (two cases), unless another of
its proposals is being evaluated (one experiment at a time: it then stays `proposed`).
Once no proposal is `evaluating`, an acknowledged request must show one proposal holding
its token, its cases numbered 0..n-1 once each; every agent's decision chain must verify on
the log, and its archival memory must hold one note (a passage tagged `evolution`, written by
the memory service's reactor) for each decision it keeps (o_memory/evolution_notes.py: all
but the per-case ones).

The first `auto_agents` agents evolve in mode `auto` instead, with nine cases an
evaluation and a canary of two steps (50 and 100 %): the chaos LLM's judge prefers the
answer of the agent with more evolution marks (chaos/llm.py), so each of their proposals
made once they have nine finished runs is accepted, rolled out to their live traffic (the
load's own requests) and promoted, or aborted by the canary's analysis; one accepted while
another's canary runs waits for it. Their checks, beside the ones above
(`canary_problems`): the persona holds each mark at most once, and exactly the marks the
history makes (a promotion adds its proposal's, a rollback leaves its version's); no mark of
a proposal never promoted; every canary's decisions are a start, advances at rising weights
and at most one end, nothing after it; at most one canary in progress; the version served
is the last one promoted or rolled back to and holds the persona as it is.

Some of their `propose` requests roll them back instead (chaos/load.py), to the version
served before the one served then: each acknowledged one is one `VersionRolledBack` with its
token in the reason, whose persona has exactly the marks of the version it rolled back to
(`rollback_problems`: a rollback takes back the decisions since its target, no more, no
less, also across earlier rollbacks).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from chaos.api import get_json, paginate
from chaos.llm import EVOLVED, TOKEN, evolved_mark

# What each chaos agent's evolution is set to at the start (PUT .../evolution/config).
CONFIG = {"enabled": True, "cases_per_evaluation": 2, "max_votes_per_conversation": 2}
# ... and the first `auto_agents` agents': the gate accepts after nine straight wins.
AUTO_CONFIG = {
    "enabled": True,
    "mode": "auto",
    "cases_per_evaluation": 9,
    "max_votes_per_conversation": 100,
    "canary_steps": [50, 100],
    "analysis_every": 3,
    "canary_judge_samples": 1,
}
ENDS = ("RolloutCompleted", "RolloutAborted")
# The tag of the notes of decisions in archival memory, and the decisions without one.
NOTE_TAG = "evolution"
UNNOTED = frozenset({"CaseEvaluated", "EvaluationStarted", "EvolutionToolCalled"})


def proposal_body(token: str) -> dict[str, Any]:
    return {
        "patch": {
            "ops": [{"op": "append_text", "target": "block:persona", "text": evolved_mark(token)}],
            "rationale": f"chaos proposal {token}",
        }
    }


@dataclass
class EvolutionView:
    agent_id: str
    proposals: list[dict[str, Any]]  # each as GET .../proposals/{id} shows it, cases too
    verified: dict[str, Any]  # GET .../evolution/verify
    history: list[dict[str, Any]] = field(default_factory=list)  # GET .../evolution/history
    notes: int = 0  # passages tagged `evolution` in its archival memory
    rollouts: list[dict[str, Any]] = field(default_factory=list)  # GET .../evolution/rollouts
    versions: dict[str, Any] = field(default_factory=dict)  # GET .../evolution/versions
    persona: str = ""  # its persona block's value

    @property
    def awaiting_promotion(self) -> bool:
        """A canary passed at full traffic whose promotion (automatic here) is not yet seen."""
        return any(r.get("status") == "completed" for r in self.rollouts)

    @property
    def evaluating(self) -> list[str]:
        return [p["id"] for p in self.proposals if p.get("status") == "evaluating"]

    @property
    def noted(self) -> int:
        """How many notes its decisions make."""
        return sum(1 for d in self.history if d.get("type") not in UNNOTED)

    @property
    def settled(self) -> bool:
        return not self.evaluating and not self.awaiting_promotion and self.notes == self.noted

    @property
    def progress(self) -> int:
        """Grows with every decision and note: while it does, the service is working."""
        return len(self.history) + self.notes


async def read_evolution(http: httpx.AsyncClient, agent_ids: list[str]) -> dict[str, EvolutionView]:
    views = {}
    for agent_id in agent_ids:
        base = f"/v1/agents/{agent_id}/evolution"
        listed = await get_json(http, f"{base}/proposals")
        proposals = [await get_json(http, f"{base}/proposals/{p['id']}") for p in listed]
        passages = await paginate(http, f"/v1/agents/{agent_id}/archival-memory")
        persona = await get_json(http, f"/v1/agents/{agent_id}/core-memory/blocks/persona")
        views[agent_id] = EvolutionView(
            agent_id,
            proposals,
            await get_json(http, f"{base}/verify"),
            await get_json(http, f"{base}/history"),
            sum(1 for p in passages if is_note(p)),
            await get_json(http, f"{base}/rollouts"),
            await get_json(http, f"{base}/versions"),
            str(persona.get("value") or ""),
        )
    return views


def is_note(passage: dict[str, Any]) -> bool:
    return NOTE_TAG in (passage.get("tags") or [])


async def wait_decided(
    http: httpx.AsyncClient,
    agent_ids: list[str],
    commands_pending: Callable[[], Awaitable[int]],
    stalled_after: float = 120.0,
) -> tuple[dict[str, EvolutionView], float]:
    """Wait until the evolution service has no command left (`commands_pending`: its
    consumer's, an evaluation waiting its turn included), no proposal is being evaluated
    and every decision's note is written; or until nothing moved for `stalled_after` s
    (a backlog of evaluations, one at a time, may take longer than that in all). The views
    as last read, and the seconds waited."""
    loop = asyncio.get_running_loop()
    start = moved = loop.time()
    progress = -1
    while True:
        views = await read_evolution(http, agent_ids)
        pending = await commands_pending()
        if pending == 0 and all(v.settled for v in views.values()):
            return views, loop.time() - start
        now = sum(v.progress for v in views.values())
        if now != progress:
            progress, moved = now, loop.time()
        elif loop.time() - moved > stalled_after:
            return views, loop.time() - start
        await asyncio.sleep(1.0)


def by_token(views: dict[str, EvolutionView]) -> dict[str, list[dict[str, Any]]]:
    """The proposals holding each token in their rationale."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for view in views.values():
        for proposal in view.proposals:
            for token in TOKEN.findall(str(proposal.get("rationale") or "")):
                found[token].append(proposal)
    return found


def missing(found: list[dict[str, Any]]) -> list[str]:
    if not found:
        return ["the proposal"]
    if any(p.get("status") == "evaluating" for p in found):
        return ["the evaluation's end"]
    return []


def case_problems(proposal: dict[str, Any]) -> list[str]:
    """Cases not numbered 0..n-1 once each (one recorded twice, or one skipped)."""
    numbers = [int(c["n"]) for c in proposal.get("cases") or []]
    twice = sorted(n for n, k in Counter(numbers).items() if k > 1)
    gaps = sorted(set(range(max(numbers, default=-1) + 1)) - set(numbers))
    out = [f"case {n} x2 in {proposal['id']}" for n in twice]
    return out + [f"case {n} absent from {proposal['id']}" for n in gaps]


def described(found: list[dict[str, Any]]) -> str:
    shown = [
        f"{p['id']}: {p.get('status')} ({p.get('reason') or '-'}),"
        f" cases {[c['n'] for c in p.get('cases') or []]}"
        for p in found
    ]
    return f"found: proposals {shown or '-'}"


@dataclass(frozen=True)
class Problem:
    category: str  # lost | duplicated | versions (as chaos/checks.py's findings)
    text: str
    cause: str


def canary_problems(view: EvolutionView) -> list[Problem]:
    """What the agent's promotions and canaries must be (see the module's docstring)."""
    out: list[Problem] = []
    who = view.agent_id
    marks = Counter(EVOLVED.findall(view.persona))
    promoted = {
        token
        for p in view.proposals
        if p.get("status") == "promoted"
        for token in TOKEN.findall(str(p.get("rationale") or ""))
    }
    for token, n in sorted(marks.items()):
        if n > 1:
            out.append(
                Problem("duplicated", f"{who}: {token}'s change x{n} in the persona", _TWICE)
            )
        if token not in promoted:
            out.append(
                Problem("duplicated", f"{who}: {token}'s change served, never promoted", _STRAY)
            )
    expected = expected_marks(view)
    for token in sorted(expected - set(marks)):
        out.append(Problem("lost", f"{who}: {token}'s change not in the persona", _GONE))
    for token in sorted(set(marks) - expected - (set(marks) - promoted)):
        out.append(
            Problem("duplicated", f"{who}: {token}'s change in the persona, taken back", _BACK)
        )
    live = [r["rollout_id"] for r in view.rollouts if r.get("status") in ("running", "completed")]
    if len(live) > 1:
        out.append(Problem("versions", f"{who}: canaries {live} at once", _TWO_CANARIES))
    for rollout in view.rollouts:
        wrong = rollout_problem(rollout)
        if wrong:
            out.append(
                Problem("versions", f"{who}: canary {rollout['rollout_id']}: {wrong}", wrong)
            )
    served = [h["decision"] for h in view.history if h.get("type") in SERVING]
    if served:
        serving = view.versions.get("serving")
        if serving != served[-1]["version_id"]:
            out.append(
                Problem(
                    "versions",
                    f"{who}: serving {serving}, last served {served[-1]['version_id']}",
                    "the version served is not the last promoted or rolled back to",
                )
            )
        spec = next(
            (v["spec"] for v in view.versions.get("versions") or [] if v["version_id"] == serving),
            None,
        )
        if spec is not None and (spec.get("blocks") or {}).get("persona") != view.persona:
            out.append(
                Problem(
                    "versions",
                    f"{who}: the persona is not the version served's",
                    "a promotion's effects and its decision disagree",
                )
            )
    return out


def expected_marks(view: EvolutionView) -> set[str]:
    """The marks the agent's history leaves in its persona: a promotion adds its proposal's,
    a rollback leaves those of the version it made (checked against its target's by
    `rollback_problems`)."""
    tokens = {str(p["id"]): TOKEN.findall(str(p.get("rationale") or "")) for p in view.proposals}
    expected: set[str] = set()
    for h in view.history:
        decision = h.get("decision") or {}
        if h.get("type") == "VersionPromoted":
            expected |= set(tokens.get(str(decision.get("proposal_id")), []))
        elif h.get("type") == "VersionRolledBack":
            expected = set(EVOLVED.findall(_persona(decision.get("spec"))))
    return expected


def rolled_back_by(view: EvolutionView | None, token: str) -> list[dict[str, Any]]:
    """The rollbacks a request made: its token in their reason."""
    if view is None:
        return []
    return [
        h["decision"]
        for h in view.history
        if h.get("type") == "VersionRolledBack"
        and token in TOKEN.findall(str(h["decision"].get("reason") or ""))
    ]


def rollback_problems(
    view: EvolutionView, decisions: list[dict[str, Any]], target: str
) -> list[Problem]:
    """A rollback's persona must hold exactly the marks of the version it rolled back to."""
    spec = next(
        (v["spec"] for v in view.versions.get("versions") or [] if v["version_id"] == target),
        None,
    )
    if spec is None:
        return [Problem("versions", f"{view.agent_id}: version {target} not listed", _UNLISTED)]
    want = sorted(EVOLVED.findall(_persona(spec)))
    out = []
    for decision in decisions:
        got = sorted(EVOLVED.findall(_persona(decision.get("spec"))))
        if got != want:
            text = (
                f"{view.agent_id}: rolled back to {target} ({decision.get('reason')}):"
                f" changes {got} in the persona, the target's {want}"
            )
            out.append(Problem("versions", text, _NOT_TARGET))
    return out


def _persona(spec: Any) -> str:
    blocks = (spec or {}).get("blocks") or {}
    return str(blocks.get("persona") or "")


def rollout_problem(rollout: dict[str, Any]) -> str | None:
    """Why a canary's decisions are not a start, advances at rising weights and at most
    one end (None: they are)."""
    kinds = [d["type"] for d in rollout.get("decisions") or []]
    if not kinds or kinds[0] != "RolloutStarted" or kinds.count("RolloutStarted") != 1:
        return f"decisions {kinds} do not begin with one RolloutStarted"
    ends = [i for i, k in enumerate(kinds) if k in ENDS]
    if len(ends) > 1 or (ends and ends[0] != len(kinds) - 1):
        return f"decisions {kinds} end more than once, or go on after their end"
    weights = [
        float(d["weight"])
        for d in rollout["decisions"]
        if d["type"] in ("RolloutStarted", "RolloutAdvanced")
    ]
    if any(b <= a for a, b in itertools.pairwise(weights)):
        return f"weights {weights} do not rise"
    return None


_TWICE = "a promotion's change made twice"
_STRAY = "a change served without its promotion"
_GONE = "a change the history keeps lost"
_BACK = "a change taken back by a rollback still served"
_UNLISTED = "a rollback's target is not among the agent's versions"
_NOT_TARGET = "a rollback did not take back exactly the decisions since its target"
SERVING = ("VersionPromoted", "VersionRolledBack")
_TWO_CANARIES = "two canaries in progress at once"
