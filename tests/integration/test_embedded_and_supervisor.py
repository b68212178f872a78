"""Embedded servers and the process supervisor, as an operator running `make run` sees them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import nats
import pytest

from o_runtime.embedded import EmbeddedNats, EmbeddedPostgres, pid_alive
from o_runtime.supervisor import ServiceSpec, Supervisor, _start_time

SLEEPER = (sys.executable, "-c", "import time; time.sleep(600)")
DEADLINE = 20.0


async def _publish_and_count(url: str) -> tuple[int, int]:
    """Publish one message to stream T; return (PubAck seq, messages now in the stream)."""
    nc = await nats.connect(url)
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
        assert await _publish_and_count(server.url) == (1, 1)
    finally:
        await asyncio.to_thread(server.stop)

    # A clean restart on the same folder keeps the stream.
    server = EmbeddedNats(tmp_path)
    await asyncio.to_thread(server.start)
    try:
        assert await _publish_and_count(server.url) == (2, 2)
        orphan_pid = server.pid
        assert orphan_pid is not None
        # Its owner dies without stopping it (kill -9): the next owner must replace it, since
        # two servers on one store directory would corrupt it.
        successor = EmbeddedNats(tmp_path)
        await asyncio.to_thread(successor.start)
        try:
            assert not pid_alive(orphan_pid)
            assert await _publish_and_count(successor.url) == (3, 3)
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


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not pid_alive(int(entry.name)):
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmd:
            found.append(f"{entry.name} {cmd}")
    return found


class _Notifications(asyncio.DatagramProtocol):
    """The receiving end of the supervisor's sd_notify messages."""

    def __init__(self) -> None:
        self.ready: asyncio.Queue[bytes] = asyncio.Queue()

    def datagram_received(self, data: bytes, addr: object) -> None:
        if b"READY=1" in data:
            self.ready.put_nowait(data)


async def _run_supervisor(
    data: Path, log: Path, notifications: _Notifications, notify_socket: Path
) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL")}
    env |= {
        "O_DATA_DIR": str(data),
        "O_SERVICES": "gateway",
        "O_HTTP_PORT": "0",
        "NOTIFY_SOCKET": str(notify_socket),
    }
    # Output goes to a file, not a pipe: children a killed supervisor leaves behind would keep
    # a pipe open, and asyncio's wait() waits for its pipes to close.
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "o_runtime.supervisor", env=env, stdout=out, stderr=out
        )
    waiting = asyncio.ensure_future(notifications.ready.get())
    exited = asyncio.ensure_future(proc.wait())
    await asyncio.wait([waiting, exited], timeout=DEADLINE, return_when=asyncio.FIRST_COMPLETED)
    exited.cancel()
    if not waiting.done():
        waiting.cancel()
        proc.kill()
        await proc.wait()
        pytest.fail(await asyncio.to_thread(log.read_text))
    return proc


async def test_make_run_stops_cleanly_on_ctrl_c_even_after_a_kill_9(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "supervisor.log"
    notify_socket = tmp_path / "notify.sock"
    transport, notifications = await asyncio.get_running_loop().create_datagram_endpoint(
        _Notifications, local_addr=str(notify_socket), family=socket.AF_UNIX
    )
    try:
        await _kill_then_rerun(data, log, notifications, notify_socket)
    finally:
        transport.close()
        # Only does something when the test failed half-way.
        for line in _processes_mentioning(str(data)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)


async def _kill_then_rerun(
    data: Path, log: Path, notifications: _Notifications, notify_socket: Path
) -> None:
    # kill -9 of the previous supervisor leaves its servers and services running behind it.
    first = await _run_supervisor(data, log, notifications, notify_socket)
    first.kill()
    await first.wait()
    assert _processes_mentioning(str(data))
    orphans = json.loads((data / "supervisor.json").read_text())["children"]

    second = await _run_supervisor(data, log, notifications, notify_socket)
    second.send_signal(signal.SIGINT)
    code = await asyncio.wait_for(second.wait(), DEADLINE)
    assert code == 0, await asyncio.to_thread(log.read_text)
    assert _processes_mentioning(str(data)) == []
    assert not any(pid_alive(pid) and _start_time(pid) == start for pid, start in orphans)
