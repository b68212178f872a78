"""The evaluations waiting for a shadow slot go in the order they were proposed
(o_evolution/waiting_line.py)."""

from __future__ import annotations

from o_evolution.waiting_line import WaitingLine


def test_the_oldest_waiting_evaluation_goes_first() -> None:
    line = WaitingLine(forget_after=8.0)
    assert line.older_waits(12, now=0.0) is False
    assert line.older_waits(10, now=0.5) is False  # (older than 12: it may go)
    assert line.older_waits(12, now=2.0) is True  # 10 waits still
    line.leave(10)
    assert line.older_waits(12, now=2.5) is False


def test_one_not_seen_again_is_forgotten_and_holds_up_no_one() -> None:
    line = WaitingLine(forget_after=8.0)
    line.older_waits(3, now=0.0)  # (then taken by another replica: never back here)
    assert line.older_waits(7, now=5.0) is True
    assert line.older_waits(7, now=8.5) is False
