"""Embedded servers and the process supervisor, as an operator running `make run` sees them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import nats
import pytest

from o_devtools.embedded import EmbeddedNats, EmbeddedPostgres, pid_alive
from o_devtools.supervisor import (
    DataDirInUse,
    ServiceSpec,
    Supervisor,
    _start_time,
    claim_state_file,
)
from o_runtime.nats_identity import Identity

SLEEPER = (sys.executable, "-c", "import time; time.sleep(600)")
DEADLINE = 20.0


async def _publish_and_count(server: EmbeddedNats) -> tuple[int, int]:
    """Publish one message to stream T; return (PubAck seq, messages now in the stream)."""
    operator = Identity.from_file("operator", server.seed_file("operator"))
    nc = await nats.connect(server.url, **operator.options())
    try:
        js = nc.jetstream()
        await js.add_stream(name="T", subjects=["t.>"])
        ack = await js.publish("t.one", b"hello")
        assert ack.stream == "T"
        info = await js.stream_info("T")
        return ack.seq, info.state.messages
    finally:
        await nc.close()


async def test_embedded_nats_acks_jetstream_publish_and_survives_restart(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path)
    await asyncio.to_thread(server.start)
    try:
        assert server.url.startswith("nats://127.0.0.1:")
        assert await _publish_and_count(server) == (1, 1)
    finally:
        await asyncio.to_thread(server.stop)

    # A clean restart on the same folder keeps the stream.
    server = EmbeddedNats(tmp_path)
    await asyncio.to_thread(server.start)
    try:
        assert await _publish_and_count(server) == (2, 2)
        orphan_pid = server.pid
        assert orphan_pid is not None
        # Its owner dies without stopping it (kill -9): the next owner must replace it, since
        # two servers on one store directory would corrupt it.
        successor = EmbeddedNats(tmp_path)
        await asyncio.to_thread(successor.start)
        try:
            assert not pid_alive(orphan_pid)
            assert await _publish_and_count(successor) == (3, 3)
        finally:
            await asyncio.to_thread(successor.stop)
    finally:
        await asyncio.to_thread(server.stop)


async def _check_postgres(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        assert await conn.fetchval("SELECT 1") == 1
        assert await conn.fetchval("SELECT current_database()") == "o"
        ext = await conn.fetchval("SELECT extname FROM pg_extension WHERE extname = 'vector'")
        assert ext == "vector"
        distance = await conn.fetchval("SELECT '[1,2,3]'::vector <-> '[1,2,4]'::vector")
        assert distance == 1.0
        await conn.execute("CREATE TABLE IF NOT EXISTS runs (n serial PRIMARY KEY)")
        await conn.execute("INSERT INTO runs DEFAULT VALUES")
        return [str(n) for n in await conn.fetch("SELECT n FROM runs ORDER BY n")]
    finally:
        await conn.close()


async def test_embedded_postgres_has_vector_and_restarts_after_stop_and_kill(
    tmp_path: Path,
) -> None:
    server = EmbeddedPostgres(tmp_path)
    await asyncio.to_thread(server.start)
    try:
        assert server.url.startswith("postgresql://")
        assert len(await _check_postgres(server.url)) == 1
    finally:
        await asyncio.to_thread(server.stop)
    assert server.pid is None

    server = EmbeddedPostgres(tmp_path)
    await asyncio.to_thread(server.start)
    assert len(await _check_postgres(server.url)) == 2
    postmaster = server.pid
    assert postmaster is not None

    # A crash: the postmaster dies without cleaning up (stale postmaster.pid and socket lock).
    os.kill(postmaster, signal.SIGKILL)
    server = EmbeddedPostgres(tmp_path)
    await asyncio.to_thread(server.start)
    try:
        assert server.pid != postmaster
        assert len(await _check_postgres(server.url)) == 3
    finally:
        await asyncio.to_thread(server.stop)
    assert not pid_alive(postmaster)


@pytest.fixture
async def supervisor() -> AsyncIterator[Supervisor]:
    sup = Supervisor(
        [ServiceSpec("sleeper", SLEEPER), ServiceSpec("pair", SLEEPER, replicas=2)],
        dict(os.environ),
    )
    await sup.start()
    try:
        yield sup
    finally:
        await sup.stop()


async def test_supervisor_restarts_a_killed_child(supervisor: Supervisor) -> None:
    [victim] = supervisor.pids("sleeper")
    others = supervisor.pids("pair")
    assert len(others) == 2

    os.kill(victim, signal.SIGKILL)
    await asyncio.wait_for(supervisor.wait_for_restarts("sleeper", 1), DEADLINE)

    [replacement] = supervisor.pids("sleeper")
    assert replacement != victim
    assert supervisor.restart_count("sleeper") == 1
    assert supervisor.pids("pair") == others
    assert supervisor.restart_count("pair") == 0

    everyone = [replacement, *others]
    await supervisor.stop()
    assert supervisor.pids("sleeper") == supervisor.pids("pair") == []
    assert not any(pid_alive(pid) for pid in everyone)


async def test_supervisor_backs_off_a_crash_looping_child_and_stops_promptly() -> None:
    sup = Supervisor(
        [ServiceSpec("crasher", (sys.executable, "-c", "raise SystemExit(3)"))],
        dict(os.environ),
        backoff_initial=0.05,
        backoff_max=60.0,
    )
    await sup.start()
    try:
        # 0.05 + 0.1 + 0.2 s of backoff, then the next wait is 0.4 s, 0.8 s...
        await asyncio.wait_for(sup.wait_for_restarts("crasher", 3), DEADLINE)
    finally:
        # stop() must interrupt a pending backoff rather than sleep it out.
        await asyncio.wait_for(sup.stop(), 5.0)
    assert sup.pids("crasher") == []


async def test_supervisor_kills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    ready = asyncio.Event()

    async def on_connect(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ready.set()
        w.close()

    # The child reports over a socket once its handler is in place; SIGTERM before that would
    # simply kill it.
    address = str(tmp_path / "ready.sock")
    server = await asyncio.start_unix_server(on_connect, address)
    stubborn = (
        sys.executable,
        "-c",
        "import signal, socket, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "socket.socket(socket.AF_UNIX).connect(sys.argv[1])\n"
        "time.sleep(600)\n",
        address,
    )
    sup = Supervisor([ServiceSpec("stubborn", stubborn)], dict(os.environ), stop_timeout=0.5)
    await sup.start()
    try:
        [pid] = sup.pids("stubborn")
        await asyncio.wait_for(ready.wait(), DEADLINE)
    finally:
        await asyncio.wait_for(sup.stop(), 5.0)
        server.close()
    assert not pid_alive(pid)
    assert sup.restart_count("stubborn") == 0


async def test_a_new_supervisor_stops_what_a_killed_one_left_running(tmp_path: Path) -> None:
    # Where no parent-death signal took them along (not Linux), a killed supervisor's services
    # live on, holding the gateway's port: the next one stops them, as its state file names them.
    orphan = await asyncio.create_subprocess_exec(*SLEEPER)
    state_file = tmp_path / "supervisor.json"
    dead_supervisor = [2**22 + 1, "1"]  # no such process
    state = {"supervisor": dead_supervisor, "children": [[orphan.pid, _start_time(orphan.pid)]]}
    state_file.write_text(json.dumps(state))

    await asyncio.wait_for(claim_state_file(state_file), DEADLINE)
    assert await asyncio.wait_for(orphan.wait(), DEADLINE) == -signal.SIGTERM
    claimed = json.loads(state_file.read_text())
    assert claimed == {"supervisor": [os.getpid(), _start_time(os.getpid())], "children": []}


async def test_a_second_supervisor_on_the_same_data_is_refused(tmp_path: Path) -> None:
    other = await asyncio.create_subprocess_exec(*SLEEPER)
    try:
        state_file = tmp_path / "supervisor.json"
        state = {"supervisor": [other.pid, _start_time(other.pid)], "children": []}
        state_file.write_text(json.dumps(state))
        with pytest.raises(DataDirInUse):
            await claim_state_file(state_file)
    finally:
        other.kill()
        await other.wait()
