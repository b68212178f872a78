"""The memory service's decisions against real JetStream and Postgres.

Given what the log holds, when a block command arrives, then: a command whose
effect is recorded changes nothing (even when the stream's duplicate window
cannot recognise it), and a decision is never made on a projection that lost
its last commits, whatever this process was told.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from o_contracts import subjects
from o_contracts.commands import CreateBlock, UpdateBlock
from o_contracts.envelope import Envelope
from o_contracts.events import BlockUpdated
from o_contracts.ids import new_id
from o_contracts.models import BlockSpec
from o_memory.handlers import MemoryCommands
from o_memory.projections import memory
from o_runtime.commands import Delivery
from o_runtime.eventlog import EventLog
from o_runtime.projector import Projector
from o_runtime.reads import ProjectionReads
from o_runtime.waiting import ProjectionWatcher

# The handlers are called here as the command consumer would on a first delivery.
FIRST = Delivery(stream_seq=1, num_delivered=1)


@dataclass
class MemoryService:
    """What MemoryCommands uses of its service: the log, the pool, the watcher, checked reads."""

    eventlog: EventLog
    pool: asyncpg.Pool
    watcher: ProjectionWatcher
    reads: ProjectionReads
    projector: Projector


@pytest.fixture
async def service(
    eventlog: EventLog, pool: asyncpg.Pool, watcher: ProjectionWatcher
) -> AsyncIterator[MemoryService]:
    projector = Projector(memory, pool, eventlog, on_committed=watcher.applied)
    projector.start()
    yield MemoryService(eventlog, pool, watcher, ProjectionReads(pool, watcher), projector)
    await projector.stop()


def command(data: Any, key: str) -> Envelope[Any]:
    return Envelope.wrap(data, aggregate_id=key, producer="test")


async def block_events(eventlog: EventLog, block_id: str) -> list[Envelope[Any]]:
    return [r.envelope for r in await eventlog.read_subject(subjects.block_subject(block_id))]


async def new_block(cmds: MemoryCommands, value: str) -> str:
    block_id = new_id("block")
    reply = await cmds.create_block(
        command(
            CreateBlock(block_id=block_id, spec=BlockSpec(label="notes", value=value)), block_id
        ),
        FIRST,
    )
    assert reply.ok, reply.error
    return block_id


async def test_a_command_whose_effect_is_recorded_changes_nothing(
    service: MemoryService,
) -> None:
    cmds = MemoryCommands(service)  # type: ignore[arg-type]
    block_id = await new_block(cmds, "one")
    update = command(UpdateBlock(block_id=block_id, changes={"value": "two"}), block_id)
    # Its effect, appended under an event id the duplicate window does not know
    # (as when the first delivery's ack was lost long ago).
    effect = update.caused(
        BlockUpdated(block_id=block_id, version=2, changes={"value": "two"}),
        aggregate_id=block_id,
        producer="memory",
    )
    appended = await service.eventlog.append(subjects.block_subject(block_id), effect)
    reply = await cmds.update_block(update, FIRST)
    assert reply.ok and reply.seq == appended.seq
    events = await block_events(service.eventlog, block_id)
    assert [e.type for e in events] == ["BlockCreated", "BlockUpdated"]
    # A new command is still decided and applied.
    again = command(UpdateBlock(block_id=block_id, changes={"value": "three"}), block_id)
    assert (await cmds.update_block(again, FIRST)).ok
    events = await block_events(service.eventlog, block_id)
    assert len(events) == 3
    value = await service.pool.fetchval("SELECT value FROM blocks WHERE id = $1", block_id)
    assert value == "three"


async def test_no_decision_on_a_projection_that_lost_its_last_commit(
    service: MemoryService,
) -> None:
    cmds = MemoryCommands(service)  # type: ignore[arg-type]
    block_id = await new_block(cmds, "a")
    first = command(UpdateBlock(block_id=block_id, changes={"value": "a b"}), block_id)
    acknowledged = await cmds.update_block(first, FIRST)
    assert acknowledged.ok and acknowledged.seq is not None
    # Postgres crashes and loses that commit, checkpoint included; this process
    # was told it was applied (the projector said so) and still believes it.
    await service.projector.stop()
    async with service.pool.acquire() as conn, conn.transaction():
        await conn.execute("UPDATE blocks SET value = 'a', version = 1 WHERE id = $1", block_id)
        await conn.execute(
            "DELETE FROM block_versions WHERE block_id = $1 AND version = 2", block_id
        )
        await conn.execute(
            "UPDATE projection_checkpoints SET last_seq = $1 WHERE projection = 'memory'",
            acknowledged.seq - 1,
        )
    assert service.watcher.reached("memory") >= acknowledged.seq
    second = command(UpdateBlock(block_id=block_id, changes={"value": "a b c"}), block_id)
    # The projector comes back only once the decision waits for it (a waiter
    # says so on NATS); a decision that does not wait is made on the stale row.
    wanted: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_wanted(_msg: Any) -> None:
        if not wanted.done():
            wanted.set_result(None)

    sub = await service.eventlog.nc.subscribe(
        subjects.projection_wanted_subject("memory"), cb=on_wanted
    )
    deciding = asyncio.create_task(cmds.update_block(second, FIRST))
    await asyncio.wait({deciding, wanted}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    await sub.unsubscribe()
    service.projector.start()
    reply = await deciding
    assert reply.ok, reply.error
    events = await block_events(service.eventlog, block_id)
    # One version per acknowledged change, none decided on the stale row.
    assert [e.data.version for e in events[1:]] == [2, 3]
    value = await service.pool.fetchval("SELECT value FROM blocks WHERE id = $1", block_id)
    assert value == "a b c"


async def test_value_changes_are_recorded_as_edits_so_the_log_grows_with_the_edit(
    service: MemoryService,
) -> None:
    cmds = MemoryCommands(service)  # type: ignore[arg-type]
    block_id = await new_block(cmds, "Notes:")
    value = "Notes:"
    for i in range(40):
        # Appends, an insertion in the middle, non-ASCII text: positions count characters.
        value = value[:6] + f" ü{i}→" + value[6:] if i % 10 == 9 else value + f"\nfact {i} ✓"
        reply = await cmds.update_block(
            command(UpdateBlock(block_id=block_id, changes={"value": value}), block_id), FIRST
        )
        assert reply.ok, reply.error
    sizes = [
        len(raw.data) async for raw in service.eventlog.replay(subjects.block_subject(block_id))
    ][1:]
    # Each event carries its edit, not the block (now ~500 characters).
    assert max(sizes) - min(sizes) < 40, sizes
    row = await service.pool.fetchrow("SELECT value, version FROM blocks WHERE id = $1", block_id)
    assert (row["value"], row["version"]) == (value, 41)
    # Every version's value is what the block was then (the versions endpoint reads it).
    versions = await service.pool.fetch(
        "SELECT value FROM block_versions WHERE block_id = $1 ORDER BY version", block_id
    )
    assert versions[-1]["value"] == value and versions[0]["value"] == "Notes:"
