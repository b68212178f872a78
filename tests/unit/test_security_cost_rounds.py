"""bench/security_cost.py's summary over rounds: the issue's figure is the median of the
rounds' 1-step on/off medians, each round's own figure beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.median_interval import median_interval
from bench.security_cost import round_order, summary
from bench.side_by_side import Figures, Versus


def figures(client_off: float, client_on: float, paired: float) -> dict[str, Figures]:
    return {
        "1-step": Figures(
            client=Versus(client_off, client_on, paired),
            gateway=Versus(client_off - 2.0, client_on - 2.0, paired),
        )
    }


def test_a_comparison_says_how_much_more_b_takes() -> None:
    assert Versus(20.0, 21.0, 0.9).percent == pytest.approx(5.0)
    assert Versus(20.0, 19.0, -1.1).percent == pytest.approx(-5.0)


def test_the_summary_is_the_median_of_the_rounds(capsys: pytest.CaptureFixture[str]) -> None:
    # +4 %, +8 %, +6 %: the median round is +6 %, not the figure of the pooled runs.
    summary([figures(25.0, 26.0, 1.0), figures(20.0, 21.6, 1.5), figures(30.0, 31.8, 1.2)])
    out = capsys.readouterr().out
    assert "1-step, 3 rounds" in out
    assert "round  2: client  +8.0 %" in out
    assert "median  : client +6.00 %" in out
    assert "paired  1.20 ms" in out
    # No 3-step runs were made: no 3-step lines.
    assert "3-step" not in out


def test_two_versions_take_turns_going_first() -> None:
    versions = [("this", Path("/a")), ("against", Path("/b"))]
    firsts = [round_order(i, versions)[0][0] for i in range(4)]
    assert firsts == ["this", "against", "this", "against"]
    # Every round makes both.
    assert all({n for n, _ in round_order(i, versions)} == {"this", "against"} for i in range(4))
    # One version alone: its rounds, in order.
    assert round_order(1, versions[:1]) == versions[:1]


def test_each_versions_summary_says_which_code_it_was(capsys: pytest.CaptureFixture[str]) -> None:
    summary([figures(25.0, 26.0, 1.0)], "against (/b)")
    out = capsys.readouterr().out
    assert "1-step, 1 rounds, against (/b): on/off medians" in out
    assert "median  : client +4.00 %" in out


def test_the_medians_interval_is_read_from_the_rounds_in_order() -> None:
    # Eight rounds: the 2nd smallest and 2nd largest bound the median with 1 - 2 * 9/256.
    rounds = [6.8, 4.3, 5.8, 8.0, 6.7, 7.0, 5.1, 4.4]
    interval = median_interval(rounds)
    assert interval is not None
    assert (interval.low, interval.high) == (4.4, 7.0)
    assert interval.coverage == pytest.approx(1 - 2 * 9 / 256)
    # Asking more confidence widens it to the extremes (1 - 2/256).
    wider = median_interval(rounds, level=0.95)
    assert wider is not None and (wider.low, wider.high) == (4.3, 8.0)
    # Four rounds can never bound the median with 90 %: no interval, rather than a false one.
    assert median_interval([1.0, 2.0, 3.0, 4.0]) is None


def test_the_summary_says_where_the_median_lies(capsys: pytest.CaptureFixture[str]) -> None:
    # Eight rounds of +2 % to +9 % at the client (the gateway's a little more: 2 ms less off).
    rounds = [figures(50.0, 50.0 + p / 2, 1.0) for p in (2, 3, 4, 5, 6, 7, 8, 9)]
    summary(rounds)
    out = capsys.readouterr().out
    assert "median's 93% interval: client +3.0 to +8.0 %" in out
    # Too few rounds: no interval line.
    summary(rounds[:3])
    assert "interval" not in capsys.readouterr().out
