"""Event reactors against real JetStream: no event is lost when a replica dies mid-reaction.

A reactor replica that dies holds events it was delivered but never reacted to. They
must come again to a live replica, whatever that replica acks meanwhile: an ack is the
promise that the acked event's reaction happened, and only that event's.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.events import AgentCreated, AgentDeleted
from o_devtools.embedded import EmbeddedNats
from o_devtools.supervisor import ServerKeeper
from o_runtime.commands import PULL_EXPIRES
from o_runtime.env import Env
from o_runtime.eventlog import EventLog, Recorded, ensure_streams
from o_runtime.reactor import ACK_WAIT, EventReactor, reactor_config, replace_cumulative_consumer
from o_setup import topology
from tests.integration.conftest import server_operator, until


class Reactions:
    """What one replica reacted to; blocks (as a dying process would) when told to, or
    takes `slow` seconds over each reaction."""

    def __init__(self, block: bool = False, slow: float = 0.0) -> None:
        self.seen: list[str] = []
        self.block = block
        self.slow = slow
        self.entered = asyncio.Event()
        self.changed = asyncio.Event()

    async def on_deleted(self, records: list[Recorded]) -> None:
        self.entered.set()
        if self.block:
            await asyncio.Event().wait()  # never returns: the replica dies here
        await asyncio.sleep(self.slow)  # (the reaction's own work, not a wait for anything)
        self.seen.extend(r.envelope.aggregate_id for r in records)
        self.changed.set()

    async def until(self, wanted: set[str], timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while not wanted <= set(self.seen):
                self.changed.clear()
                await self.changed.wait()


def deleted(agent_id: str) -> Envelope[AgentDeleted]:
    return Envelope.wrap(AgentDeleted(agent_id=agent_id), aggregate_id=agent_id, producer="test")


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex[:8]


async def append_deleted(eventlog: EventLog, tag: str, agent_ids: list[str]) -> None:
    # (On subjects of the test's own: o.evt.agent.<tag>.conv.<id>.)
    for agent_id in agent_ids:
        await eventlog.append(subjects.conversation_subject(tag, agent_id), deleted(agent_id))


def replica(eventlog: EventLog, name: str, reactions: Reactions, tag: str) -> EventReactor:
    return EventReactor(
        eventlog,
        name,
        f"{subjects.EVENTS_PREFIX}.agent.{tag}.>",
        {AgentDeleted: reactions.on_deleted},
        ack_wait=1.0,
    )


async def test_events_held_by_a_dead_replica_come_again_although_a_live_one_acks_later_events(
    eventlog: EventLog, tag: str
) -> None:
    name = f"reactor-{tag}"
    dying = Reactions(block=True)
    first = replica(eventlog, name, dying, tag)
    await first.start()
    held = [f"{tag}-held-{i}" for i in range(3)]
    await append_deleted(eventlog, tag, held)
    async with asyncio.timeout(10):
        await dying.entered.wait()
    # The replica dies holding the three events it was delivered (no ack was sent).
    await first.stop()

    live = Reactions()
    second = replica(eventlog, name, live, tag)
    await second.start()
    later = [f"{tag}-later-{i}" for i in range(2)]
    await append_deleted(eventlog, tag, later)
    try:
        await live.until(set(later), timeout=10)
        # Acking the later events must not have acked the held ones: they come again
        # once their ack wait has passed.
        await live.until(set(held), timeout=15)
    finally:
        await second.stop()
    assert sorted(live.seen) == sorted(held + later)
    assert dying.seen == []


async def test_a_slow_reaction_is_not_delivered_again_to_another_replica_meanwhile(
    eventlog: EventLog, tag: str
) -> None:
    """A reaction three ack waits long: the reactor tells the server it is still at work,
    so the event it holds is not given to the other replica under it."""
    name = f"reactor-{tag}"
    slow = Reactions(slow=3.0)
    other = Reactions()
    first = replica(eventlog, name, slow, tag)
    await first.start()
    ids = [f"{tag}-slow"]
    await append_deleted(eventlog, tag, ids)
    async with asyncio.timeout(10):
        await slow.entered.wait()
    second = replica(eventlog, name, other, tag)
    await second.start()
    try:
        await slow.until(set(ids), timeout=15)
    finally:
        await second.stop()
        await first.stop()
    # Without the reactor's word, the other replica (pulling all along) would have been
    # given them a second after their first delivery, and reacted at once.
    assert slow.seen == ids
    assert other.seen == []


async def test_the_setup_role_shortens_an_old_reactors_ack_wait(eventlog: EventLog) -> None:
    """Reactors were made with a 30 s ack wait (a crash held their events that long): the
    setup role brings an existing consumer to ACK_WAIT in place."""
    durable = topology.events("evolution-turns")
    old = reactor_config(durable.name, durable.filter_subject, ack_wait=30.0)
    await eventlog.js.add_consumer(subjects.EVENTS_STREAM, old)
    before = await eventlog.js.consumer_info(subjects.EVENTS_STREAM, durable.name)
    await topology.apply(eventlog.js, Env({}))
    after = await eventlog.js.consumer_info(subjects.EVENTS_STREAM, durable.name)
    assert (before.config.ack_wait, after.config.ack_wait) == (30.0, ACK_WAIT)


async def test_a_replica_reacts_to_each_event_once_when_nothing_fails(
    eventlog: EventLog, tag: str
) -> None:
    reactions = Reactions()
    one = replica(eventlog, f"reactor-{tag}", reactions, tag)
    await one.start()
    ids = [f"{tag}-{i}" for i in range(40)]
    try:
        await append_deleted(eventlog, tag, ids)
        await reactions.until(set(ids), timeout=10)
    finally:
        await one.stop()
    assert reactions.seen == ids


async def test_a_consumer_made_with_cumulative_acks_is_replaced_from_its_ack_floor(
    eventlog: EventLog, tag: str
) -> None:
    """Deployments made before per-event acks have consumers with AckPolicy.ALL, which
    NATS cannot change in place: the setup role (o_setup apply) replaces them, starting
    after the last acked event, so nothing acked is reacted to again and nothing unacked
    is skipped."""
    name = f"reactor-{tag}"
    filter_subject = f"{subjects.EVENTS_PREFIX}.agent.{tag}.>"
    await eventlog.js.add_consumer(
        subjects.EVENTS_STREAM,
        ConsumerConfig(
            durable_name=name,
            filter_subject=filter_subject,
            ack_policy=AckPolicy.ALL,
            deliver_policy=DeliverPolicy.NEW,
        ),
    )
    sub = await eventlog.js.pull_subscribe_bind(name, stream=subjects.EVENTS_STREAM)
    acked = [f"{tag}-acked-{i}" for i in range(2)]
    await append_deleted(eventlog, tag, acked)
    msgs = await sub.fetch(2, timeout=5)
    await msgs[-1].ack_sync()
    await sub.unsubscribe()
    pending = [f"{tag}-pending-{i}" for i in range(2)]
    await append_deleted(eventlog, tag, pending)

    await replace_cumulative_consumer(eventlog.js, name, filter_subject)
    reactions = Reactions()
    upgraded = replica(eventlog, name, reactions, tag)
    await upgraded.start()
    try:
        await reactions.until(set(pending), timeout=10)
        info = await eventlog.js.consumer_info(subjects.EVENTS_STREAM, name)
    finally:
        await upgraded.stop()
    assert info.config.ack_policy == AckPolicy.EXPLICIT
    assert reactions.seen == pending


async def test_the_setup_role_removes_a_durable_o_no_longer_uses(
    eventlog: EventLog, monkeypatch: pytest.MonkeyPatch, tag: str
) -> None:
    # (A retired name of the test's own: the shared server's real ones stay as they are.)
    name = f"retired-{tag}"
    monkeypatch.setattr(topology, "RETIRED", ((subjects.EVENTS_STREAM, name),))
    await eventlog.js.add_consumer(
        subjects.EVENTS_STREAM,
        ConsumerConfig(durable_name=name, ack_policy=AckPolicy.EXPLICIT),
    )
    await topology.apply(eventlog.js, Env({}))
    with pytest.raises(NotFoundError):
        await eventlog.js.consumer_info(subjects.EVENTS_STREAM, name)
    await topology.apply(eventlog.js, Env({}))  # and again: nothing to remove, no error


async def test_events_delivered_while_a_reaction_is_slow_wait_for_it_not_for_another_replica(
    eventlog: EventLog, tag: str
) -> None:
    """Events keep coming into the replica's open pull request while it reacts: it tells
    the server it holds them too, so none goes to another replica meanwhile, and it reacts
    to them in order once the slow reaction is done."""
    name = f"reactor-{tag}"
    slow = Reactions(slow=3.0)
    other = Reactions()
    first = replica(eventlog, name, slow, tag)
    await first.start()
    await append_deleted(eventlog, tag, [f"{tag}-slow"])
    async with asyncio.timeout(10):
        await slow.entered.wait()
    waiting = [f"{tag}-waiting-{i}" for i in range(3)]
    await append_deleted(eventlog, tag, waiting)
    second = replica(eventlog, name, other, tag)
    await second.start()
    try:
        await slow.until({f"{tag}-slow", *waiting}, timeout=20)
    finally:
        await second.stop()
        await first.stop()
    assert slow.seen == [f"{tag}-slow", *waiting]
    assert other.seen == []


async def test_one_pull_request_serves_events_that_come_one_by_one(
    eventlog: EventLog, tag: str
) -> None:
    """Each event is reacted to as it comes, through the one request left open: no pull
    request (nor status message) beside each event."""
    name = f"reactor-{tag}"
    requests: list[bytes] = []

    async def counted(msg: Msg) -> None:
        requests.append(msg.data)

    spy = await eventlog.nc.subscribe(
        f"$JS.API.CONSUMER.MSG.NEXT.{subjects.EVENTS_STREAM}.{name}", cb=counted
    )
    reactions = Reactions()
    one = replica(eventlog, name, reactions, tag)
    await one.start()
    ids = [f"{tag}-{i}" for i in range(10)]
    try:
        for agent_id in ids:
            await append_deleted(eventlog, tag, [agent_id])
            await reactions.until({agent_id}, timeout=10)
    finally:
        await one.stop()
        await spy.unsubscribe()
    assert reactions.seen == ids
    # (A second only if the test outlasted the first's expiry, PULL_EXPIRES.)
    assert 1 <= len(requests) <= 2


async def test_events_no_reaction_is_for_are_acked_without_one(
    eventlog: EventLog, tag: str
) -> None:
    """Ignored events' acks wait for another ack to go with, but not beyond ACK_LATER:
    with nothing to react to, the server still hears every one of them acked."""
    name = f"reactor-{tag}"
    ignoring = EventReactor(
        eventlog,
        name,
        f"{subjects.EVENTS_PREFIX}.agent.{tag}.>",
        {AgentCreated: Reactions().on_deleted},
        ack_wait=30.0,
    )
    await ignoring.start()
    try:
        await append_deleted(eventlog, tag, [f"{tag}-{i}" for i in range(5)])

        async def all_acked() -> bool:
            info = await eventlog.js.consumer_info(subjects.EVENTS_STREAM, name)
            return (
                info.delivered.stream_seq > 0
                and info.num_ack_pending == 0
                and (info.ack_floor.stream_seq == info.delivered.stream_seq)
            )

        # (Redelivery after ack_wait, 30 s, cannot be what acks them within this.)
        await until(all_acked, "every ignored event acked", within=10.0)
        info = await eventlog.js.consumer_info(subjects.EVENTS_STREAM, name)
    finally:
        await ignoring.stop()
    assert info.num_redelivered == 0


async def test_a_reactor_goes_on_after_its_nats_server_was_killed(
    nats_keeper: ServerKeeper, tag: str
) -> None:
    """A restarted server has lost the open pull request without a word: the reactor asks
    again once reconnected, and reacts to events appended after the restart."""
    server = nats_keeper.server
    assert isinstance(server, EmbeddedNats)
    eventlog = await EventLog.connect(server.url, name="test", identity=server_operator(server))
    try:
        await ensure_streams(eventlog.js)
        reactions = Reactions()
        one = replica(eventlog, f"reactor-{tag}", reactions, tag)
        await one.start()
        try:
            await append_deleted(eventlog, tag, [f"{tag}-before"])
            await reactions.until({f"{tag}-before"}, timeout=10)
            victim = nats_keeper.pid
            assert victim is not None
            os.kill(victim, signal.SIGKILL)
            await asyncio.wait_for(nats_keeper.wait_for_restarts(1), 20)
            await until(lambda: eventlog.nc.is_connected, "reconnected", within=20.0)
            await append_deleted(eventlog, tag, [f"{tag}-after"])
            # (Well within the lost request's expiry: asked again at the reconnection.)
            await reactions.until({f"{tag}-after"}, timeout=PULL_EXPIRES - 1)
        finally:
            await one.stop()
        # (The first event's ack may have been lost with the server: it may come again.)
        assert set(reactions.seen) == {f"{tag}-before", f"{tag}-after"}
        assert reactions.seen.count(f"{tag}-after") == 1
    finally:
        await eventlog.close()
