"""The operator's tool against a real nats-server: a JetStream snapshot restored is the
stream as it was (sequences, times, headers, a consumer's position), and the roll call
gathers every replica that answers, ready or not."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import uuid
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

from o_devtools.supervisor import ServerKeeper
from o_ops.jetstream_snapshots import SnapshotFailed, restore, snapshot
from o_runtime import roll_call as roll_call_module
from o_runtime.readiness import Readiness
from o_runtime.roll_call import RollCallAnswerer, roll_call
from tests.integration.conftest import server_operator
from tests.servers import Servers, operator


@pytest.fixture
async def nc(servers: Servers) -> AsyncIterator[NATS]:
    client = await nats.connect(servers.nats_url, **operator())
    yield client
    await client.close()


async def test_a_restored_snapshot_is_the_stream_as_it_was_with_its_consumers(nc: NATS) -> None:
    js = nc.jetstream()
    name = f"T_SNAP_{uuid.uuid4().hex[:8].upper()}"
    subject = f"t.snap.{name.lower()}"
    await js.add_stream(
        StreamConfig(name=name, subjects=[f"{subject}.>"], storage=StorageType.FILE)
    )
    try:
        for i in range(300):
            # Bodies that do not compress away, so the snapshot comes in several chunks.
            await js.publish(f"{subject}.{i % 3}", uuid.uuid4().bytes * 40, headers={"K": str(i)})
        await js.delete_msg(name, 5)
        await js.add_consumer(
            name, ConsumerConfig(durable_name="worker", ack_policy=AckPolicy.EXPLICIT)
        )
        sub = await js.pull_subscribe(f"{subject}.>", durable="worker", stream=name)
        for msg in await sub.fetch(10):
            await msg.ack()
        await sub.unsubscribe()
        before = [await js.get_msg(name, seq) for seq in (1, 6, 300)]
        chunks: list[bytes] = []
        meta = await snapshot(nc, name, chunks.append, chunk_size=4096)
        assert len(chunks) > 1
        assert meta["config"]["name"] == name and meta["state"]["messages"] == 299

        await js.delete_stream(name)
        state = await restore(nc, name, meta, iter(chunks))

        assert (state["messages"], state["first_seq"], state["last_seq"]) == (299, 1, 300)
        after = [await js.get_msg(name, seq) for seq in (1, 6, 300)]
        assert [(m.seq, m.subject, m.data, m.headers, m.time) for m in after] == [
            (m.seq, m.subject, m.data, m.headers, m.time) for m in before
        ]
        worker = await js.consumer_info(name, "worker")
        assert worker.ack_floor is not None and worker.ack_floor.stream_seq == 11
        assert worker.num_pending == 289
    finally:
        await js.delete_stream(name)


async def test_a_snapshot_of_a_stream_that_does_not_exist_fails_saying_so(nc: NATS) -> None:
    with pytest.raises(SnapshotFailed) as failed:
        await snapshot(nc, f"T_NONE_{uuid.uuid4().hex[:8].upper()}", lambda _: None)
    assert "not found" in str(failed.value)


def ready(ok: bool, why: str = "") -> Readiness:
    checks = {"nats": "ok"} if ok else {"nats": "ok", "postgres": why}
    return Readiness(ok, checks)


async def test_the_roll_call_gathers_every_replica_and_settles_once_all_expected_answered(
    servers: Servers, nc: NATS
) -> None:
    answerers = []
    clients = []
    for service, ok in (("gateway", True), ("executor", True), ("executor", False)):

        async def check(ok: bool = ok) -> Readiness:
            return ready(ok, "unreachable")

        client = await nats.connect(servers.nats_url, **operator())
        answerer = RollCallAnswerer(service, check)
        # (Two replicas in one test process: their instances told apart by hand.)
        answerer.instance = f"{service}-{len(answerers)}"
        await answerer.start(client)
        answerers.append(answerer)
        clients.append(client)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        present = await roll_call(nc, ["gateway", "executor"], deadline=5.0, settle=0.3)
        took = loop.time() - started
        # (The e2e tests' system shares this nats-server and answers too.)
        mine = {a.instance for a in answerers}
        present = [p for p in present if p.instance in mine]
        assert [(p.service, p.instance, p.ready) for p in present] == [
            ("executor", "executor-1", True),
            ("executor", "executor-2", False),
            ("gateway", "gateway-0", True),
        ]
        assert present[1].checks == {"nats": "ok", "postgres": "unreachable"}
        assert took < 2.0  # settled: no need to wait for the deadline

        # A service nobody answers for: the asker waits for the whole deadline.
        started = loop.time()
        absent = f"absent-{uuid.uuid4().hex[:8]}"
        present = await roll_call(nc, ["gateway", absent], deadline=1.0)
        assert absent not in {p.service for p in present}
        assert loop.time() - started >= 1.0
    finally:
        for answerer in answerers:
            await answerer.stop()
        for client in clients:
            await client.close()


async def test_a_replica_whose_checks_hang_still_answers_not_ready(
    servers: Servers, nc: NATS, monkeypatch: pytest.MonkeyPatch
) -> None:
    from o_runtime import roll_call as module

    monkeypatch.setattr(module, "ANSWER_WITHIN", 0.2)

    async def hanging() -> Readiness:
        await asyncio.sleep(60)
        raise AssertionError("not reached")

    client = await nats.connect(servers.nats_url, **operator())
    answerer = RollCallAnswerer("memory", hanging)
    # (The e2e tests' system shares this nats-server: its memory service answers too.)
    answerer.instance = f"hanging-{uuid.uuid4().hex[:8]}"
    await answerer.start(client)
    try:
        # Expecting a service that never answers, the call waits out its deadline: a slow
        # answer is not cut off by the shared e2e system's memory service answering first.
        everyone = await roll_call(nc, ["memory", "never-answers"], deadline=3.0)
        (present,) = [p for p in everyone if p.instance == answerer.instance]
        assert (present.ready, present.checks) == (False, {"readiness": "not decided within 0.2s"})
    finally:
        await answerer.stop()
        await client.close()


async def test_a_roll_call_nobody_hears_gathers_no_one_and_warns_of_nothing(
    nats_keeper: ServerKeeper, caplog: pytest.LogCaptureFixture
) -> None:
    # (A server of its own: the shared one has the e2e system's services answering.)
    server = nats_keeper.server
    client = await nats.connect(server.url, **server_operator(server).options())
    try:
        with caplog.at_level(logging.WARNING, logger="o_runtime.roll_call"):
            present = await roll_call(client, ["gateway"], deadline=0.5)
        # nats-server's "no responders" status came back to the inbox: not an answer.
        assert present == []
        assert caplog.records == []
    finally:
        await client.close()


async def test_an_answerer_started_while_nats_does_not_answer_starts_and_answers_later(
    nats_keeper: ServerKeeper,
) -> None:
    server = nats_keeper.server
    options = server_operator(server).options()
    client = await nats.connect(server.url, **options)
    answerer = RollCallAnswerer("memory", lambda: _ready())
    answerer.instance = f"unanswered-{uuid.uuid4().hex[:8]}"
    pid = nats_keeper.pid
    assert pid is not None
    try:
        # Frozen, its connections still open: what the client cannot tell from a slow
        # server (a partition looks the same). Starting does not wait for it long, nor fail.
        os.kill(pid, signal.SIGSTOP)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await answerer.start(client)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert loop.time() - started < roll_call_module.FLUSH_WITHIN + 2.0

        asker = await nats.connect(server.url, **options)
        try:
            deadline = loop.time() + 20.0
            heard: set[str] = set()
            while answerer.instance not in heard:
                assert loop.time() < deadline, "the answerer never answered"
                present = await roll_call(asker, ["memory"], deadline=0.5, settle=0.1)
                heard = {p.instance for p in present}
        finally:
            await asker.close()
    finally:
        await answerer.stop()
        await client.close()


async def _ready() -> Readiness:
    return ready(True)
