"""The log as WAL, against a real JetStream server: dedup and optimistic concurrency."""

from __future__ import annotations

import asyncio

import pytest

from o_contracts import subjects
from o_contracts.envelope import Envelope, decode
from o_contracts.events import BlockCreated, BlockUpdated
from o_contracts.ids import new_id
from o_contracts.models import BlockSpec
from o_runtime.eventlog import AppendRejected, ConcurrencyConflict, EventLog, ensure_streams


def created(block_id: str) -> Envelope[BlockCreated]:
    return Envelope.wrap(
        BlockCreated(block_id=block_id, spec=BlockSpec(label="human", value="v")),
        aggregate_id=block_id,
        producer="test",
    )


def updated(block_id: str, version: int, value: str) -> Envelope[BlockUpdated]:
    return Envelope.wrap(
        BlockUpdated(block_id=block_id, version=version, changes={"value": value}),
        aggregate_id=block_id,
        producer="test",
    )


async def test_streams_are_declared_idempotently(eventlog: EventLog) -> None:
    await ensure_streams(eventlog.js)
    await ensure_streams(eventlog.js)
    info = await eventlog.js.stream_info(subjects.EVENTS_STREAM)
    assert info.config.duplicate_window == 120
    assert info.config.storage == "file"


async def test_retried_publish_is_deduplicated(eventlog: EventLog) -> None:
    block_id = new_id("block")
    subject = subjects.block_subject(block_id)
    env = created(block_id)
    first = await eventlog.append(subject, env)
    again = await eventlog.append(subject, env)
    assert not first.duplicate
    assert again.duplicate and again.seq == first.seq
    history = await eventlog.read_subject(subject)
    assert [r.envelope.id for r in history] == [env.id]


async def test_stale_expected_sequence_is_a_conflict(eventlog: EventLog) -> None:
    block_id = new_id("block")
    subject = subjects.block_subject(block_id)
    first = await eventlog.append(subject, created(block_id), expected_last_seq=0)
    await eventlog.append(subject, updated(block_id, 2, "a"), expected_last_seq=first.seq)
    with pytest.raises(ConcurrencyConflict):
        await eventlog.append(subject, updated(block_id, 2, "b"), expected_last_seq=first.seq)
    # A new aggregate's subject must be empty.
    with pytest.raises(ConcurrencyConflict):
        await eventlog.append(subject, created(block_id), expected_last_seq=0)
    values = [r.envelope.data for r in await eventlog.read_subject(subject)]
    assert [type(v).__name__ for v in values] == ["BlockCreated", "BlockUpdated"]


async def test_concurrent_deciders_retry_on_fresh_state(eventlog: EventLog) -> None:
    """Ten writers race to bump a version; every one lands, each on the state it saw."""
    block_id = new_id("block")
    subject = subjects.block_subject(block_id)
    await eventlog.append(subject, created(block_id), expected_last_seq=0)
    seen: dict[int, int] = {}

    async def bump(i: int) -> None:
        async def decide(last: int) -> Envelope[BlockUpdated]:
            history = await eventlog.read_subject(subject)
            version = len(history) + 1
            seen[i] = version
            return updated(block_id, version, f"writer {i}")

        await eventlog.append_decided(subject, decide, attempts=20)

    await asyncio.gather(*(bump(i) for i in range(10)))
    history = await eventlog.read_subject(subject)
    versions = [r.envelope.data.version for r in history[1:]]  # type: ignore[attr-defined]
    assert versions == list(range(2, 12))
    assert sorted(seen.values()) == versions


async def test_exhausted_retries_are_rejected_not_dropped(eventlog: EventLog) -> None:
    block_id = new_id("block")
    subject = subjects.block_subject(block_id)
    await eventlog.append(subject, created(block_id))

    async def decide_and_interfere(last: int) -> Envelope[BlockUpdated]:
        # Someone else always writes between our read and our append.
        await eventlog.append(subject, updated(block_id, 0, "interloper"))
        return updated(block_id, 0, "mine")

    with pytest.raises(AppendRejected) as err:
        await eventlog.append_decided(subject, decide_and_interfere, attempts=3)
    assert err.value.status == 409
    values = [r.envelope.data for r in await eventlog.read_subject(subject)]
    assert all(getattr(v, "changes", {}).get("value") != "mine" for v in values)


async def test_envelope_round_trip_keeps_every_field(eventlog: EventLog) -> None:
    block_id = new_id("block")
    env = created(block_id).caused(
        BlockUpdated(block_id=block_id, version=2, changes={"value": "x"}),
        aggregate_id=block_id,
        producer="memory",
    )
    appended = await eventlog.append(subjects.block_subject(block_id), env)
    msg = await eventlog.js.get_msg(subjects.EVENTS_STREAM, appended.seq)
    assert msg.headers and msg.headers["Nats-Msg-Id"] == env.id
    back = decode(msg.data or b"")
    assert back == env
    assert back.correlation_id is not None and back.causation_id is not None
