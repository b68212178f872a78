"""Memory-stream retrieval (Park et al., Generative Agents): rank by recency, importance
and relevance, each min-max normalised over the candidates, then weighted.

recency = decay ** hours since the memory was last accessed. Weights and decay
are per agent (o_contracts.memory_stream.StreamSettings).
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


def rank(candidates: Sequence[Candidate], settings: StreamSettings, now: datetime) -> list[Scored]:
    """Candidates best first. Ties keep the relevance order."""
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
    order = sorted(range(len(scored)), key=lambda i: (-scored[i].score, -candidates[i].relevance))
    return [scored[i] for i in order]
