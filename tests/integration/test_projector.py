"""Projectors against real JetStream and Postgres: exactly once, dead letters, rebuild."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import msgpack
import pytest
from faststream.nats import NatsBroker, NatsMessage

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.events import (
    AgentCreated,
    AgentDeleted,
    BlockAttached,
    BlockCreated,
    BlockUpdated,
)
from o_contracts.ids import new_id
from o_contracts.models import BlockSpec
from o_memory.projections import memory
from o_runtime.db import migrate
from o_runtime.eventlog import EventLog
from o_runtime.projector import Outcome, Projection, Projector
from o_runtime.waiting import ProjectionWatcher
from tests.servers import Servers


def fresh_memory_projection() -> Projection:
    # The real handlers under a unique name: each test gets its own durable
    # consumer and checkpoint row.
    return Projection(
        name=f"memory_{uuid.uuid4().hex[:8]}",
        filter_subject=memory.filter_subject,
        tables=memory.tables,
        handlers=memory.handlers,
    )


def env(event: Any, aggregate_id: str) -> Envelope[Any]:
    return Envelope.wrap(event, aggregate_id=aggregate_id, producer="test")


async def create_block(log: EventLog, label: str = "human", value: str = "v") -> tuple[str, int]:
    block_id = new_id("block")
    appended = await log.append(
        subjects.block_subject(block_id),
        env(BlockCreated(block_id=block_id, spec=BlockSpec(label=label, value=value)), block_id),
    )
    return block_id, appended.seq


async def update_block(log: EventLog, block_id: str, version: int, value: str) -> int:
    appended = await log.append(
        subjects.block_subject(block_id),
        env(BlockUpdated(block_id=block_id, version=version, changes={"value": value}), block_id),
    )
    return appended.seq


@pytest.fixture
async def broker(servers: Servers) -> AsyncIterator[NatsBroker]:
    b = NatsBroker(servers.nats_url)
    yield b
    await b.stop()


async def rows(pool: asyncpg.Pool, table: str, order: str) -> list[dict[str, Any]]:
    return [dict(r) for r in await pool.fetch(f"SELECT * FROM {table} ORDER BY {order}")]


async def test_an_event_applied_twice_takes_effect_once(
    eventlog: EventLog, pool: asyncpg.Pool
) -> None:
    projector = Projector(fresh_memory_projection(), pool, eventlog)
    block_id, seq = await create_block(eventlog)
    msg = await eventlog.js.get_msg(subjects.EVENTS_STREAM, seq)
    subject = subjects.block_subject(block_id)
    assert await projector.apply(seq, subject, msg.data or b"") is Outcome.APPLIED
    assert await projector.apply(seq, subject, msg.data or b"") is Outcome.SKIPPED
    versions = await pool.fetch("SELECT * FROM block_versions WHERE block_id = $1", block_id)
    assert len(versions) == 1


class CrashBeforeAck(Projector):
    """Commits, then 'crashes' before acking the first delivery of one event."""

    def __init__(self, *args: Any, victim_seq: int) -> None:
        super().__init__(*args)
        self.victim_seq = victim_seq
        self.outcomes: list[tuple[int, int, Outcome]] = []
        self.redelivery_skipped = asyncio.Event()

    async def on_message(self, msg: NatsMessage) -> None:
        meta = msg.raw_message.metadata
        seq = meta.sequence.stream
        outcome = await self.apply(seq, msg.raw_message.subject, msg.raw_message.data)
        self.outcomes.append((seq, meta.num_delivered, outcome))
        if seq == self.victim_seq and meta.num_delivered == 1:
            await msg.nack()  # the server redelivers, as after a lost ack
            return
        if seq == self.victim_seq and outcome is Outcome.SKIPPED:
            self.redelivery_skipped.set()
        await msg.ack()


async def test_a_redelivered_event_is_skipped_by_the_live_projector(
    eventlog: EventLog, pool: asyncpg.Pool, broker: NatsBroker
) -> None:
    block_id, _ = await create_block(eventlog, value="one")
    victim = await update_block(eventlog, block_id, 2, "one\ntwo")
    projector = CrashBeforeAck(fresh_memory_projection(), pool, eventlog, victim_seq=victim)
    projector.subscribe(broker)
    await broker.start()
    await asyncio.wait_for(projector.redelivery_skipped.wait(), timeout=30)
    deliveries = [(n, o) for s, n, o in projector.outcomes if s == victim]
    assert deliveries == [(1, Outcome.APPLIED), (2, Outcome.SKIPPED)]
    block = await pool.fetchrow("SELECT value, version FROM blocks WHERE id = $1", block_id)
    assert (block["value"], block["version"]) == ("one\ntwo", 2)
    versions = await pool.fetchval(
        "SELECT count(*) FROM block_versions WHERE block_id = $1", block_id
    )
    assert versions == 2


async def test_a_malformed_event_is_dead_lettered_and_the_consumer_goes_on(
    eventlog: EventLog, pool: asyncpg.Pool, broker: NatsBroker, watcher: ProjectionWatcher
) -> None:
    projection = fresh_memory_projection()
    bad_subject = subjects.block_subject(new_id("block"))
    bad = await eventlog.js.publish(bad_subject, b"\xc1 not msgpack", stream=subjects.EVENTS_STREAM)
    unknown = await eventlog.js.publish(
        bad_subject,
        msgpack.packb(
            {
                "id": "x",
                "type": "NoSuchEvent",
                "v": 1,
                "aggregate_id": "a",
                "time": "2026-01-01T00:00:00Z",
                "producer": "p",
                "data": {},
            }
        ),
        stream=subjects.EVENTS_STREAM,
    )
    block_id, good = await create_block(eventlog, value="after the bad ones")
    Projector(projection, pool, eventlog).subscribe(broker)
    await broker.start()
    await watcher.wait(good, projection.name, timeout=30)

    assert await pool.fetchval("SELECT value FROM blocks WHERE id = $1", block_id) == (
        "after the bad ones"
    )
    dlq_subject = subjects.dead_letter_subject(f"projection-{projection.name}")
    sub = await eventlog.js.subscribe(
        dlq_subject, stream=subjects.DEAD_LETTER_STREAM, ordered_consumer=True
    )
    seen = {}
    for _ in range(2):
        m = await sub.next_msg(timeout=5)
        assert m.headers is not None
        seen[int(m.headers["O-Origin-Seq"])] = m.headers["O-Reason"]
    await sub.unsubscribe()
    assert "not MessagePack" in seen[bad.seq]
    assert "unknown message type 'NoSuchEvent'" in seen[unknown.seq]


async def test_rebuild_gives_the_same_rows(
    eventlog: EventLog, pool: asyncpg.Pool, broker: NatsBroker, watcher: ProjectionWatcher
) -> None:
    projection = fresh_memory_projection()
    projector = Projector(projection, pool, eventlog)
    projector.subscribe(broker)
    await broker.start()
    human, _ = await create_block(eventlog, "human", "Sam")
    persona, _ = await create_block(eventlog, "persona", "helpful")
    await update_block(eventlog, human, 2, "Sam, likes tea")
    agent_id = new_id("agent")
    agent_subject = subjects.agent_subject(agent_id)
    await eventlog.append(
        agent_subject,
        env(
            AgentCreated(
                agent_id=agent_id,
                name="a",
                system="",
                agent_type="letta_v1_agent",
                llm_config={"model": "m"},
                block_ids=[human],
            ),
            agent_id,
        ),
    )
    await eventlog.append(
        agent_subject, env(BlockAttached(agent_id=agent_id, block_id=persona), agent_id)
    )
    other = new_id("agent")
    await eventlog.append(
        subjects.agent_subject(other),
        env(
            AgentCreated(
                agent_id=other,
                name="b",
                system="",
                agent_type="letta_v1_agent",
                llm_config={"model": "m"},
                block_ids=[human],
            ),
            other,
        ),
    )
    last = (
        await eventlog.append(
            subjects.agent_subject(other), env(AgentDeleted(agent_id=other), other)
        )
    ).seq
    await watcher.wait(last, projection.name, timeout=30)

    tables = {
        "blocks": "id",
        "block_versions": "block_id, version",
        "agent_blocks": "agent_id, position",
    }
    before = {t: await rows(pool, t, o) for t, o in tables.items()}
    assert [r["block_id"] for r in before["agent_blocks"] if r["agent_id"] == agent_id] == [
        human,
        persona,
    ]
    # The deleted agent's attachment went; the shared block it used did not.
    assert not [r for r in before["agent_blocks"] if r["agent_id"] == other]
    assert human in {r["id"] for r in before["blocks"]}

    replayed = await projector.rebuild()
    after = {t: await rows(pool, t, o) for t, o in tables.items()}
    assert replayed >= 7
    assert after == before
    checkpoint = await pool.fetchval(
        "SELECT last_seq FROM projection_checkpoints WHERE projection = $1", projection.name
    )
    assert checkpoint >= last


async def test_migrations_run_once(database_url: str, pool: asyncpg.Pool) -> None:
    assert await migrate(database_url) == []
    names = await pool.fetch("SELECT name FROM schema_migrations ORDER BY name")
    assert [r["name"] for r in names][:1] == ["0001_runtime.sql"]
    assert await pool.fetchval("SELECT extname FROM pg_extension WHERE extname = 'vector'")
