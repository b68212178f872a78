"""Memory-stream scoring, settings, vectors and the LLM answers' parsing: pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from o_contracts.vectors import pack_vector, unpack_vector
from o_memory.archival import fuse, relevance
from o_memory.judgement import parse_insights, parse_rating
from o_memory.stream import (
    RELEVANCE_ONLY,
    Candidate,
    InvalidStreamSettings,
    StreamSettings,
    rank,
)

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def cand(pid: str, rel: float, imp: int, hours_ago: float) -> Candidate:
    return Candidate(pid, rel, imp, NOW - timedelta(hours=hours_ago))


def test_relevance_only_orders_by_relevance() -> None:
    cs = [cand("a", 0.2, 10, 0), cand("b", 0.9, 1, 900), cand("c", 0.5, 5, 10)]
    assert [s.id for s in rank(cs, RELEVANCE_ONLY, NOW)] == ["b", "c", "a"]


def test_components_are_min_max_normalised_and_weighted() -> None:
    cs = [cand("old", 1.0, 5, 24 * 30), cand("new", 0.9, 5, 1), cand("far", 0.0, 5, 1)]
    # The paper's equal weights, every candidate scored alike (no margin).
    paper = StreamSettings(1, 1, 1, relevance_margin=1)
    ranked = {s.id: s for s in rank(cs, paper, NOW)}
    assert ranked["old"].relevance == 1.0 and ranked["far"].relevance == 0.0
    assert ranked["new"].relevance == pytest.approx(0.9)
    assert ranked["old"].recency == 0.0 and ranked["new"].recency == 1.0
    # Equal importance everywhere tells candidates nothing: it contributes 0.
    assert all(s.importance == 0.0 for s in ranked.values())
    assert rank(cs, paper, NOW)[0].id == "new"


def test_recency_decays_per_hour_with_the_agents_decay() -> None:
    cs = [cand("a", 0.5, 5, 0), cand("b", 0.5, 5, 10), cand("c", 0.5, 5, 20)]
    ranked = {s.id: s for s in rank(cs, StreamSettings(1, 0, 0, decay=0.9), NOW)}
    # decay**h, then min-max: (0.9**10 - 0.9**20) / (1 - 0.9**20)
    assert ranked["b"].recency == pytest.approx((0.9**10 - 0.9**20) / (1 - 0.9**20))


def test_importance_can_lift_an_old_memory() -> None:
    cs = [cand("vital", 0.82, 9, 24 * 40), cand("trivia", 0.85, 2, 2), cand("x", 0.1, 3, 5)]
    assert rank(cs, StreamSettings(), NOW)[0].id == "vital"
    assert rank(cs, RELEVANCE_ONLY, NOW)[0].id == "trivia"
    # Only from a near-tie: 0.06 behind (0.08 normalised), the margin holds it back
    # although its score is higher.
    behind = [cand("vital", 0.79, 9, 24 * 40), *cs[1:]]
    ranked = rank(behind, StreamSettings(), NOW)
    assert ranked[0].id == "trivia" and ranked[1].id == "vital"
    assert ranked[1].score > ranked[0].score


def test_recency_and_importance_cannot_lift_a_clearly_less_relevant_memory() -> None:
    # The benchmark's failure: the answer leads a note that only names the same
    # person; the note is newer and rated more important.
    answer = cand("answer", 0.85, 3, 24 * 32)
    other_topic = cand("same person, other topic", 0.60, 7, 24 * 3)
    filler = cand("filler", 0.10, 2, 24 * 50)
    cs = [answer, other_topic, filler]
    no_margin = StreamSettings(relevance_margin=1.0)
    assert rank(cs, no_margin, NOW)[0].id == "same person, other topic"
    ranked = rank(cs, StreamSettings(), NOW)
    assert [s.id for s in ranked] == ["answer", "same person, other topic", "filler"]
    # The score itself is the memory-stream formula, unchanged by the margin:
    # only the order between the tiers is.
    assert {s.id: s.score for s in ranked} == {s.id: s.score for s in rank(cs, no_margin, NOW)}


def test_within_the_margin_recency_still_decides() -> None:
    # An update phrased unlike the question trails the stale statement a little.
    cs = [cand("stale", 0.85, 4, 24 * 35), cand("update", 0.82, 4, 24 * 5), cand("x", 0.1, 2, 9)]
    ranked = rank(cs, StreamSettings(), NOW)
    # Normalised, "update" loses 0.03 / 0.75 = 0.04 on relevance: within 0.05.
    assert 1 - ranked[0].relevance < StreamSettings().relevance_margin
    assert [s.id for s in ranked][:2] == ["update", "stale"]
    # A tighter margin holds it back.
    assert rank(cs, StreamSettings(relevance_margin=0.02), NOW)[0].id == "stale"


def test_the_margin_is_in_score_units_and_leaves_relevance_only_alone() -> None:
    cs = [cand("a", 0.9, 1, 24 * 40), cand("b", 0.5, 9, 0), cand("c", 0.2, 5, 5)]
    # An agent that asks for recency first gets it: with w_relevance 0.01 no
    # candidate loses more than 0.01 on the relevance term.
    recency_first = StreamSettings(w_recency=1, w_importance=0, w_relevance=0.01)
    assert [s.id for s in rank(cs, recency_first, NOW)] == ["b", "c", "a"]
    for margin in (0.0, 0.2, 1.0):
        only = StreamSettings(w_recency=0, w_importance=0, w_relevance=1, relevance_margin=margin)
        assert [s.id for s in rank(cs, only, NOW)] == ["a", "b", "c"]


def test_settings_from_agent_metadata() -> None:
    assert StreamSettings.from_metadata({}) == StreamSettings()
    got = StreamSettings.from_metadata({"memory_stream": {"w_recency": 0, "decay": 0.99}})
    assert got.w_recency == 0 and got.decay == 0.99 and got.w_relevance == 1.0
    wide = StreamSettings.from_metadata({"memory_stream": {"relevance_margin": 0.5}})
    assert wide.relevance_margin == 0.5 and wide.decay == StreamSettings().decay
    for bad, why in [
        ({"memory_stream": "fast"}, "must be an object"),
        ({"memory_stream": {"speed": 1}}, "unknown key"),
        ({"memory_stream": {"decay": "0.9"}}, "must be a number"),
        ({"memory_stream": {"decay": 1.5}}, "decay"),
        ({"memory_stream": {"w_recency": 0, "w_importance": 0, "w_relevance": 0}}, "weights"),
        ({"memory_stream": {"w_relevance": -1}}, "weights"),
        ({"memory_stream": {"reflection_threshold": 0}}, "reflection_threshold"),
        ({"memory_stream": {"relevance_margin": -0.1}}, "relevance_margin"),
    ]:
        with pytest.raises(InvalidStreamSettings, match=why):
            StreamSettings.from_metadata(bad)


def test_fusion_scores() -> None:
    assert fuse(["a", "b"], ["b", "c"]) == pytest.approx(
        {"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 62}
    )
    rel = relevance({"a": 0.5, "b": 0.4, "c": 0.1}, [("c", 2.0), ("b", 1.0)], ["a", "b"], "convex")
    # The exact text match lifts "c" (a code the embedding does not capture).
    assert rel == pytest.approx({"a": 0.5, "b": 0.4 + 0.15, "c": 0.1 + 0.3})


def test_vectors_round_trip_as_float32() -> None:
    v = [0.25, -1.5, 3.0]
    assert unpack_vector(pack_vector(v)) == v
    with pytest.raises(ValueError):
        unpack_vector("AAAA=")


@pytest.mark.parametrize(
    ("answer", "rating"),
    [("7", 7), ("Rating: 10", 10), (" 3/10", 3), ("echo: On the scale of 1 to 10", None),
     ("", None), (None, None), ("11", None)],
)  # fmt: skip
def test_importance_answers(answer: str | None, rating: int | None) -> None:
    assert parse_rating(answer) == rating


def test_insights_must_cite_given_statements() -> None:
    answer = (
        "1. Sam values health (because of 1, 3)\n"
        "- Sam is busy (because of 2)\n"
        "Sam likes nothing (because of 9)\n"
        "no citation here"
    )
    found = parse_insights(answer, 3)
    assert [(i.text, i.cites) for i in found] == [
        ("Sam values health", [0, 2]),
        ("Sam is busy", [1]),
    ]
