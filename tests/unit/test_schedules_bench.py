"""The schedules benchmark's verdict (bench/schedules.py: report): it fails on a slot fired
twice or never, on a late or skipped slot, and on a run started twice or not at all."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from bench.schedules import report

MINUTE = datetime(2026, 11, 24, 13, 4, tzinfo=UTC)


def event(kind: str, at: datetime, **data: Any) -> Any:
    return SimpleNamespace(type=kind, time=at, data=SimpleNamespace(**data))


def fire(n: int, late: bool = False) -> Any:
    slot = MINUTE + timedelta(seconds=n)
    return event(
        "ScheduleFired",
        slot + timedelta(milliseconds=10),
        schedule_id=f"s{n}",
        run_id=f"r{n}",
        slot=slot,
        late=late,
    )


def run(n: int, *kinds: str) -> list[Any]:
    at = MINUTE + timedelta(seconds=n, milliseconds=100)
    return [event(k, at, run_id=f"r{n}") for k in kinds]


def both(n: int) -> list[Any]:
    return run(n, "RunStarted", "RunCompleted")


def test_every_slot_fired_and_run_once_passes(capsys: pytest.CaptureFixture[str]) -> None:
    report(MINUTE, ["s0", "s1"], [fire(0), fire(1)], both(0) + both(1))
    out = capsys.readouterr().out
    assert "fired once: 2/2; missed 0, fired twice 0, skipped 0, late 0" in out
    assert "fire delay (slot to ScheduleFired), ms:   p50     10.0" in out


@pytest.mark.parametrize(
    ("fires", "runs"),
    [
        ([fire(0)], both(0)),  # s1 never fired
        ([fire(0), fire(1), fire(1)], both(0) + both(1)),  # s1 twice
        ([fire(0), fire(1, late=True)], both(0) + both(1)),  # s1 late
        ([fire(0), fire(1)], both(0) + run(1, "RunStarted")),  # r1 never completed
        ([fire(0), fire(1)], both(0) + both(1) + run(1, "RunStarted")),  # r1 started twice
        ([fire(0), fire(1)], both(0) + both(1) + both(2)),  # a run no fire made
    ],
)
def test_a_lost_or_repeated_slot_or_run_fails(fires: list[Any], runs: list[Any]) -> None:
    with pytest.raises(AssertionError):
        report(MINUTE, ["s0", "s1"], fires, runs)
