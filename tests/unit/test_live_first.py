"""Shadow work yields to users' runs (o_evolution/live_first.py)."""

from __future__ import annotations

import asyncio

from o_evolution.live_first import LiveLoad, Watch, YieldPolicy, observe, turn, wait_for_turn

POLICY = YieldPolicy(quiet=0.05, max_yield=2.0, pause_pending=20)


def test_a_case_starts_once_the_executor_has_been_idle_for_the_quiet_period() -> None:
    watch = observe(Watch(began=0.0), LiveLoad(busy=0, delivered=7), now=0.0)
    assert turn(POLICY, watch, now=0.0) == "wait"
    watch = observe(watch, LiveLoad(busy=0, delivered=7), now=0.05)
    assert watch.idle_since == 0.0
    assert turn(POLICY, watch, now=0.05) == "start"


def test_a_run_delivered_between_two_idle_samples_is_not_a_quiet_moment() -> None:
    watch = observe(Watch(began=0.0), LiveLoad(busy=0, delivered=7), now=0.0)
    # A short run came and went between the samples: the executor delivered it.
    watch = observe(watch, LiveLoad(busy=0, delivered=8), now=0.03)
    assert watch.idle_since is None
    assert turn(POLICY, watch, now=0.03) == "wait"
    watch = observe(watch, LiveLoad(busy=0, delivered=8), now=0.06)
    assert watch.idle_since == 0.06
    assert turn(POLICY, watch, now=0.09) == "wait"
    assert turn(POLICY, watch, now=0.11) == "start"


def test_a_run_in_flight_resets_the_quiet_period() -> None:
    watch = observe(Watch(began=0.0), LiveLoad(busy=0, delivered=1), now=0.0)
    watch = observe(watch, LiveLoad(busy=1, delivered=2), now=0.03)
    assert watch.idle_since is None
    assert turn(POLICY, watch, now=0.2) == "wait"


def test_under_steady_traffic_a_case_starts_after_its_longest_yield() -> None:
    watch = Watch(began=10.0)
    for i in range(40):
        now = 10.0 + i * 0.05
        watch = observe(watch, LiveLoad(busy=1, delivered=100 + i), now)
        assert turn(POLICY, watch, now) == "wait"
    assert turn(POLICY, watch, now=12.0) == "start"


def test_backed_up_live_queues_hold_shadow_work_past_its_longest_yield() -> None:
    watch = observe(Watch(began=0.0), LiveLoad(busy=21, delivered=5), now=0.0)
    assert turn(POLICY, watch, now=60.0) == "backed_up"
    watch = observe(watch, LiveLoad(busy=20, delivered=5), now=60.0)
    assert turn(POLICY, watch, now=60.0) == "start"  # (not backed up, and long past 2 s)


def test_waiting_samples_until_quiet_and_gives_up_when_the_load_cannot_be_read() -> None:
    loads = [LiveLoad(busy=1, delivered=1), LiveLoad(busy=0, delivered=2)]
    loads += [LiveLoad(busy=0, delivered=2)] * 10
    asked: list[LiveLoad] = []

    async def sample() -> LiveLoad | None:
        load = loads[len(asked)]
        asked.append(load)
        return load

    policy = YieldPolicy(quiet=0.01, max_yield=60.0, pause_pending=20)
    asyncio.run(asyncio.wait_for(wait_for_turn(policy, sample), 5))
    # Busy, then idle: the quiet period counts from the first idle sample after the run.
    assert 4 <= len(asked) <= 6

    async def unreadable() -> LiveLoad | None:
        return None

    asyncio.run(asyncio.wait_for(wait_for_turn(policy, unreadable), 5))
