"""A run hears its conversation's events (o_runtime/event_tap.py), on real JetStream and
Postgres: from the runs projection's consumer while this process follows it, with no
subscription of its own; through a subscription while it does not, or once it stops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest
from nats.aio.msg import Msg

from o_contracts import subjects
from o_contracts.envelope import Envelope, decode
from o_contracts.events import RunCancellationRequested
from o_contracts.ids import new_id
from o_executor.projections import runs
from o_runtime.event_tap import BEHIND, EventTap
from o_runtime.eventlog import EventLog
from o_runtime.projector import Projector
from tests.integration.conftest import renamed, until


class Heard:
    """What a listener was handed: the run ids of the cancellations, in order."""

    def __init__(self) -> None:
        self.run_ids: list[str] = []
        self._changed = asyncio.Event()

    def __call__(self, msg: Msg) -> None:
        event = decode(msg.data).data
        assert isinstance(event, RunCancellationRequested)
        self.run_ids.append(event.run_id)
        self._changed.set()

    async def wait_for(self, run_id: str) -> None:
        async with asyncio.timeout(10.0):
            while run_id not in self.run_ids:
                self._changed.clear()
                await self._changed.wait()


async def cancel(eventlog: EventLog, agent_id: str) -> str:
    run_id = new_id("run")
    event = RunCancellationRequested(run_id=run_id, agent_id=agent_id)
    await eventlog.append(
        subjects.agent_subject(agent_id),
        Envelope.wrap(event, aggregate_id=agent_id, producer="test"),
    )
    return run_id


@pytest.fixture
async def tap(eventlog: EventLog) -> AsyncIterator[EventTap]:
    yield EventTap(eventlog.nc)


@pytest.fixture
async def following(
    eventlog: EventLog, pool: asyncpg.Pool, tap: EventTap
) -> AsyncIterator[Projector]:
    """A runs projector (of the test's own) telling `tap`, once it follows the log.

    It starts at the log's head: a projector catching up on the events earlier tests
    appended would be behind it, and listeners would subscribe (the last test here)."""
    projection = renamed(runs)
    head = (await eventlog.js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    await pool.execute(
        "INSERT INTO projection_checkpoints (projection, last_seq) VALUES ($1, $2)",
        projection.name,
        head,
    )
    projector = Projector(projection, pool, eventlog, tap=tap)
    projector.start()
    try:
        await until(lambda: tap.following, "the projector follows the log")
        yield projector
    finally:
        await projector.stop()


async def test_while_the_projector_follows_a_listener_hears_through_it_without_a_subscription(
    eventlog: EventLog, tap: EventTap, following: Projector
) -> None:
    agent_id = new_id("agent")
    heard, elsewhere = Heard(), Heard()
    async with (
        tap.listening(subjects.agent_subject(agent_id), heard),
        tap.listening(subjects.agent_subject(new_id("agent")), elsewhere),
    ):
        assert tap.subscriptions == 0
        run_id = await cancel(eventlog, agent_id)
        await heard.wait_for(run_id)
    assert heard.run_ids == [run_id] and elsewhere.run_ids == []
    # Once the block is over, nothing is handed to it.
    await cancel(eventlog, agent_id)
    assert heard.run_ids == [run_id]


async def test_without_a_following_projector_a_listener_subscribes(
    eventlog: EventLog, tap: EventTap
) -> None:
    agent_id = new_id("agent")
    heard = Heard()
    async with tap.listening(subjects.agent_subject(agent_id), heard):
        assert tap.subscriptions == 1
        run_id = await cancel(eventlog, agent_id)
        await heard.wait_for(run_id)
    assert tap.subscriptions == 0
    assert heard.run_ids == [run_id]


async def test_a_listener_subscribes_once_the_projector_stops_following(
    eventlog: EventLog, tap: EventTap, following: Projector
) -> None:
    agent_id = new_id("agent")
    heard = Heard()
    async with tap.listening(subjects.agent_subject(agent_id), heard):
        first = await cancel(eventlog, agent_id)
        await heard.wait_for(first)
        assert tap.subscriptions == 0
        await following.stop()  # (as when its Postgres session or its NATS connection is lost)
        assert not tap.following
        await until(lambda: tap.subscriptions == 1, "the listener subscribed")
        second = await cancel(eventlog, agent_id)
        await heard.wait_for(second)
    assert heard.run_ids == [first, second]
    assert tap.subscriptions == 0


def delivered(subject: str, still_to_come: int) -> Msg:
    """An event as the projector's consumer hands it over (its metadata in the ack subject)."""
    ack = f"$JS.ACK.{subjects.EVENTS_STREAM}.runs.1.500.20.1795917626877424981.{still_to_come}"
    return Msg(_client=None, subject=subject, reply=ack, data=b"", headers=None)  # type: ignore[arg-type]


async def test_a_listener_subscribes_while_the_projector_is_far_behind_the_log(
    eventlog: EventLog, tap: EventTap
) -> None:
    # Catching up after an outage, the projector would hand a run its cancellation only
    # once it got there.
    tap.follow(True)
    elsewhere = subjects.agent_subject(new_id("agent"))
    agent_id = new_id("agent")
    heard = Heard()
    async with tap.listening(subjects.agent_subject(agent_id), heard):
        assert tap.subscriptions == 0
        tap.heard(delivered(elsewhere, still_to_come=BEHIND + 1))
        assert not tap.following
        await until(lambda: tap.subscriptions == 1, "the listener subscribed")
        run_id = await cancel(eventlog, agent_id)
        await heard.wait_for(run_id)
        # Caught up: those who listen from now on hear through the projector again.
        tap.heard(delivered(elsewhere, still_to_come=0))
        assert tap.following
        async with tap.listening(subjects.agent_subject(new_id("agent")), Heard()):
            assert tap.subscriptions == 1
    assert heard.run_ids == [run_id]
