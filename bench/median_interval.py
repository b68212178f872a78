"""A distribution-free confidence interval for a median, from order statistics.

Issue 21's figure is the median over rounds of each round's on/off medians, and rounds
spread over about four points on this project's machines, so "within 5 %" is a claim about
that median, not about one round. For n independent rounds the true median lies between the
k-th smallest and the k-th largest with probability 1 - 2 P(Binomial(n, 1/2) < k), whatever
the rounds' distribution: no normality assumed, as none holds for a machine's swings. The
interval printed is the narrowest whose coverage is at least the level asked.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    # The probability that the true median lies within [low, high].
    coverage: float


def _below(n: int, k: int) -> float:
    """P(Binomial(n, 1/2) < k)."""
    return sum(comb(n, i) for i in range(k)) / 2**n


def median_interval(values: list[float], level: float = 0.9) -> Interval | None:
    """The order-statistic interval for the median of `values` covering at least `level`;
    None when there are too few values to reach it (n < 5 for 90 %)."""
    ordered = sorted(values)
    n = len(ordered)
    best = None
    for k in range(1, n // 2 + 1):
        coverage = 1 - 2 * _below(n, k)
        if coverage < level:
            break
        best = Interval(ordered[k - 1], ordered[n - k], coverage)
    return best
