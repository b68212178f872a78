"""What a watched request's asker does next (o_runtime/watched_requests.py: Watch)."""

from __future__ import annotations

from o_runtime.watched_requests import Step, Watch


def taker_died(watch: Watch) -> Watch:
    """`watch` asked at 0, its request taken by "a", and "a" seen dead."""
    watch.asked(0.0)
    watch.took("a")
    watch.died("a")
    return watch


def test_a_request_taken_by_a_live_process_is_waited_for() -> None:
    watch = Watch(lost_after=5.0, max_asks=3)
    watch.asked(0.0)
    assert watch.next_step(1.0) is Step.WAIT
    watch.took("a")
    # Silence proves nothing: however long it takes, a taker not seen dead is waited for.
    assert watch.next_step(500.0) is Step.WAIT


def test_its_takers_death_asks_again_at_once() -> None:
    watch = taker_died(Watch(lost_after=5.0, max_asks=3))
    assert watch.next_step(0.5) is Step.ASK
    watch.asked(0.5)
    # The new ask is not yet taken: waited for, not asked again at once.
    assert watch.next_step(0.6) is Step.WAIT
    watch.took("b")
    assert watch.next_step(30.0) is Step.WAIT


def test_a_request_no_one_said_they_took_is_asked_again_after_a_while() -> None:
    watch = Watch(lost_after=5.0, max_asks=2)
    watch.asked(0.0)
    assert watch.next_step(4.9) is Step.WAIT
    assert watch.next_step(5.0) is Step.ASK
    watch.asked(5.0)
    # The last ask, never said taken (an older answerer, or a stalled one), may still be
    # answered: waited for until the request's own timeout.
    assert watch.next_step(60.0) is Step.WAIT


def test_it_gives_up_once_every_asks_taker_died() -> None:
    watch = Watch(lost_after=5.0, max_asks=2)
    for n, taker in enumerate(("a", "b")):
        watch.asked(float(n))
        watch.took(taker)
        watch.died(taker)
    assert watch.next_step(2.0) is Step.GIVE_UP


def test_a_death_heard_of_a_process_that_took_nothing_changes_nothing() -> None:
    watch = Watch(lost_after=5.0, max_asks=3)
    watch.asked(0.0)
    watch.took("a")
    watch.died("b")
    assert (watch.deaths, watch.next_step(1.0)) == (0, Step.WAIT)


def test_no_responders_fails_at_first_and_is_waited_out_after_a_death() -> None:
    first = Watch(no_one_for=10.0)
    first.asked(0.0)
    # No replica runs at all: the request fails at once, as a plain request does.
    assert first.no_one(0.0) is False
    watch = taker_died(Watch(no_one_for=10.0, max_asks=3))
    watch.asked(0.1)
    # Its replica is being restarted: asked again, and these asks are not counted.
    assert watch.no_one(0.1) is True
    assert watch.asks == 1
    watch.asked(0.6)
    assert watch.no_one(9.0) is True
    watch.asked(9.5)
    assert watch.no_one(10.1) is False
    # A replica that takes it ends the wait for one.
    watch.took("b")
    assert watch.no_one_since is None


def test_a_request_asked_once_only_gives_up_when_its_taker_dies() -> None:
    watch = taker_died(Watch(lost_after=5.0, max_asks=1))
    assert watch.next_step(0.5) is Step.GIVE_UP
    # Never said taken: perhaps still at work; waited for until the request's timeout.
    untaken = Watch(lost_after=5.0, max_asks=1)
    untaken.asked(0.0)
    assert untaken.next_step(30.0) is Step.WAIT
