"""When a failed command or reaction is tried again (o_runtime/retries.py)."""

from __future__ import annotations

import pytest

from o_runtime.env import BadSetting, Env
from o_runtime.retries import Retries


def test_a_handlers_own_failure_backs_off_from_two_seconds_unless_set() -> None:
    default = Retries.from_env(Env({}))
    assert [default.delay(attempt, outage=False) for attempt in range(1, 8)] == [
        2.0,
        4.0,
        8.0,
        16.0,
        30.0,
        30.0,
        30.0,
    ]
    quick = Retries.from_env(Env({"O_FAILURE_RETRY_DELAY": "0.25"}))
    assert [quick.delay(attempt, outage=False) for attempt in range(1, 5)] == [0.25, 0.5, 1, 2]


def test_an_outage_is_tried_again_soon_and_often_whatever_the_setting() -> None:
    for retries in (Retries(), Retries(failure_first=10.0)):
        delays = [retries.delay(attempt, outage=True) for attempt in range(1, 100)]
        assert delays[:5] == [0.5, 1.0, 2.0, 4.0, 5.0]
        assert max(delays) == 5.0


def test_a_bad_first_delay_is_refused_with_its_name() -> None:
    with pytest.raises(BadSetting) as raised:
        Retries.from_env(Env({"O_FAILURE_RETRY_DELAY": "0"}))
    assert str(raised.value) == "O_FAILURE_RETRY_DELAY must be at least 0.01, not 0"
