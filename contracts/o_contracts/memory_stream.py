"""An agent's memory-stream settings: the weights and decay of archival search ranking.

Set per agent in its metadata under "memory_stream", e.g. relevance-only is
{"w_recency": 0, "w_importance": 0, "w_relevance": 1}. Shared because the
gateway refuses bad settings when an agent is created or changed, and the
memory service ranks with them (o_memory/stream.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

METADATA_KEY = "memory_stream"


class InvalidStreamSettings(ValueError):
    pass


@dataclass(frozen=True)
class StreamSettings:
    # Not the paper's 1/1/1. Relevance is min-max normalised over the
    # candidates, and with a small embedding model the answer and a passage
    # that merely names the same person are only ~0.1 cosine apart; with
    # equal weights that passage wins whenever it is newer or more important
    # (static questions fall to R@1 ~0.5), and recency cancels importance.
    # Weights chosen by a sweep on benchmark seeds 1-25; `make bench` reports
    # seeds 101+.
    w_recency: float = 0.2
    w_importance: float = 0.3
    w_relevance: float = 1.0
    # Per hour since last access: 0.999 ** 24 = 0.976 a day, 0.85 a week,
    # 0.49 in 30 days (half-life ~29 days). An archive spans weeks to months;
    # at the paper's 0.995 (0.43 a week) a fact restated two weeks ago
    # scores 0.19 and one stated a month ago 0.03, so recency barely tells
    # them apart while it ranks yesterday's trivia far above both. Chosen
    # with relevance_margin by a sweep on benchmark seeds 1-75 (as good as
    # 0.995 and 0.998 or better there on every kind of question, at every
    # margin tried).
    decay: float = 0.999
    # Recency and importance may lift a memory above the best match only if it
    # loses at most this much on the relevance term of the score, i.e.
    # w_relevance * (1 - normalised relevance) <= relevance_margin; memories
    # further behind follow, still in score order. Without it, a passage that
    # only names the same person (~0.03-0.25 cosine behind the answer) wins
    # whenever it happens to be newer and rated more important. Larger margins
    # let more updates and important-but-old memories win and lose more plain
    # facts; 0.05 is the widest tried that missed no more static answers than
    # relevance-only on benchmark seeds 1-75 (README, retrieval benchmark).
    # Relevance-only ranking is unchanged by it; >= w_relevance turns it off.
    # See o_memory/stream.py.
    relevance_margin: float = 0.05
    reflection_threshold: int = 150

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None) -> StreamSettings:
        raw = (metadata or {}).get(METADATA_KEY)
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise InvalidStreamSettings(f"metadata.{METADATA_KEY} must be an object")
        known = {f.name for f in fields(cls)}
        unknown = set(raw) - known
        if unknown:
            raise InvalidStreamSettings(
                f"metadata.{METADATA_KEY} has unknown key(s) {sorted(unknown)}; "
                f"known: {sorted(known)}"
            )
        values: dict[str, Any] = {}
        for key, value in raw.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidStreamSettings(f"metadata.{METADATA_KEY}.{key} must be a number")
            values[key] = value
        settings = replace(cls(), **values)
        settings.validate()
        return settings

    def validate(self) -> None:
        weights = (self.w_recency, self.w_importance, self.w_relevance)
        if any(w < 0 for w in weights) or not any(w > 0 for w in weights):
            raise InvalidStreamSettings("weights must be >= 0 and at least one > 0")
        if not 0 < self.decay <= 1:
            raise InvalidStreamSettings("decay must be in (0, 1]")
        if self.relevance_margin < 0:
            raise InvalidStreamSettings("relevance_margin must be >= 0")
        if self.reflection_threshold < 1:
            raise InvalidStreamSettings("reflection_threshold must be >= 1")


RELEVANCE_ONLY = StreamSettings(w_recency=0.0, w_importance=0.0, w_relevance=1.0)
