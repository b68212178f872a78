"""Memory-stream retrieval (Park et al., Generative Agents): rank by recency, importance
and relevance, each min-max normalised over the candidates, then weighted.

recency = decay ** hours since the memory was last accessed. Weights, decay and
the relevance margin are per agent (o_contracts.memory_stream.StreamSettings).

Relevance margin. The score is the weighted sum above, normalised over all the
candidates. What the margin decides is which memories that score may lift above
the best match: only those that lose at most `relevance_margin` on the
relevance term (w_relevance * (1 - normalised relevance)); the rest follow, in
score order. Why: recency and importance are there to choose among memories
that are about the question (the newer of two statements of the same fact, the
serious event over today's trivia about the same topic), not to let a memory
that is clearly about something else win because it is newer and rated more
important. With a small embedding model the name dominates short passages'
embeddings: for "What is Greta's job?" (benchmark seed 12) the answer "Greta
works as a nurse" is 0.25 cosine ahead of "Greta drives a yellow minivan", yet
without the margin the minivan note wins, being a month newer and rated 7
against 3. The margin is in the score's own units, so it keeps its meaning
whatever the fusion's scale, and with a small w_relevance (an agent asking
for recency first) everything is within it. Relevance-only ranking
(w_recency = w_importance = 0) is unchanged: the score is then the normalised
relevance, whose order the margin preserves.

It is a trade-off, not a cure. An update phrased unlike the question ("has
moved to Oslo and lives there now" for "Where does Ana live?") can trail the
stale statement by more (up to ~0.15 cosine) than a fact about something else
trails a right answer (from ~0.03), while being newer by less and no more
important, so no ranking that only weighs how much more relevant, newer and
more important one memory is than another gets both right. The margin is the
dial: wider lets more updates and important-but-old memories win and loses
more plain facts. The default (0.05) is the widest tried that missed no more
plain facts than relevance-only on benchmark seeds 1-75 (the README's
retrieval benchmark has the curve).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from o_contracts.memory_stream import (
    RELEVANCE_ONLY,
    InvalidStreamSettings,
    StreamSettings,
)

__all__ = [
    "RELEVANCE_ONLY",
    "Candidate",
    "InvalidStreamSettings",
    "Scored",
    "StreamSettings",
    "rank",
]


@dataclass(frozen=True)
class Candidate:
    id: str
    relevance: float
    importance: int
    last_accessed_at: datetime


@dataclass(frozen=True)
class Scored:
    id: str
    score: float
    recency: float
    importance: float
    relevance: float


def _min_max(values: Sequence[float]) -> list[float]:
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        # No spread: this component cannot tell candidates apart.
        return [0.0 for _ in values]
    return [(v - lo) / (hi - lo) for v in values]


def _behind(scored: Scored, settings: StreamSettings) -> bool:
    """Too far behind the best match on relevance for recency and importance to lift it.

    The best candidate's normalised relevance is 1, so this is how much score the
    relevance term loses against it. (Equal relevance everywhere normalises to 0
    for all: then all are behind and share one tier, which changes nothing.)
    """
    return settings.w_relevance * (1.0 - scored.relevance) > settings.relevance_margin + 1e-12


def rank(candidates: Sequence[Candidate], settings: StreamSettings, now: datetime) -> list[Scored]:
    """Candidates best first: those within the relevance margin of the best
    match by score, then the others by score. Ties keep the relevance order."""
    if not candidates:
        return []
    hours = [max(0.0, (now - c.last_accessed_at).total_seconds() / 3600) for c in candidates]
    recency = _min_max([settings.decay**h for h in hours])
    importance = _min_max([float(c.importance) for c in candidates])
    relevance = _min_max([c.relevance for c in candidates])
    scored = [
        Scored(
            c.id,
            settings.w_recency * rec + settings.w_importance * imp + settings.w_relevance * rel,
            rec,
            imp,
            rel,
        )
        for c, rec, imp, rel in zip(candidates, recency, importance, relevance, strict=True)
    ]
    order = sorted(
        range(len(scored)),
        key=lambda i: (_behind(scored[i], settings), -scored[i].score, -candidates[i].relevance),
    )
    return [scored[i] for i in order]
