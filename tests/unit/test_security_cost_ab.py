"""The four-way security-cost benchmark's arithmetic (bench/security_cost_ab.py): each
checkout's cost is taken round by round, and the interval it reports for a median holds
the median of its sample and narrows as the sample agrees."""

from __future__ import annotations

import statistics
from types import SimpleNamespace
from typing import Any, cast

from bench.security_cost_ab import cost, median_interval
from bench.side_by_side import Side


def side(client_ms: list[float]) -> Side:
    return cast(Side, cast(Any, SimpleNamespace(client_ms=client_ms)))


def test_the_cost_is_taken_round_by_round() -> None:
    # Round 2 was slow for both: paired, it cancels out.
    assert cost(side([20.0, 40.0, 21.0]), side([21.5, 41.0, 23.0])) == [1.5, 1.0, 2.0]


def test_the_interval_holds_the_median() -> None:
    xs = [float(x % 17) - 3.0 for x in range(400)]
    low, high = median_interval(xs)
    assert low <= statistics.median(xs) <= high
    assert low < high


def test_a_sample_that_agrees_has_a_narrow_interval() -> None:
    assert median_interval([1.25] * 50) == (1.25, 1.25)
    wide = median_interval([float(x % 10) for x in range(100)])
    narrow = median_interval([float(x % 10) / 10 for x in range(100)])
    assert narrow[1] - narrow[0] < wide[1] - wide[0]
