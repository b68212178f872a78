"""`make run` keeps its NATS and Postgres up: a server killed with -9 is started again on the same
address with its data, clients reconnect by themselves, and stopping the supervisor in any state
leaves no process behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from o_contracts import subjects
from o_devtools.embedded import EmbeddedNats, EmbeddedPostgres, pid_alive
from o_devtools.supervisor import ServerKeeper, _start_time
from o_runtime.eventlog import EventLog
from tests.integration.conftest import server_operator, until

ROOT = Path(__file__).resolve().parents[2]

DEADLINE = 20.0


async def test_a_killed_nats_server_comes_back_on_its_port_with_its_streams(
    nats_keeper: ServerKeeper,
) -> None:
    server = nats_keeper.server
    assert isinstance(server, EmbeddedNats)
    url, victim = server.url, nats_keeper.pid
    assert victim is not None
    # The services' own connection (EventLog.connect's options): it must find its way back.
    eventlog = await EventLog.connect(url, name="test", identity=server_operator(server))
    try:
        for n in range(3):
            ack = await eventlog.js.publish(
                subjects.agent_subject(f"a{n}"), b"x", stream=subjects.EVENTS_STREAM
            )
        assert ack.seq == 3

        killed = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        await asyncio.wait_for(nats_keeper.wait_for_restarts(1), DEADLINE)
        assert nats_keeper.pid not in (None, victim)
        assert server.url == url

        # Sent while the client may still be reconnecting: buffered, then acknowledged.
        ack = await eventlog.js.publish(
            subjects.agent_subject("a3"), b"x", stream=subjects.EVENTS_STREAM, timeout=10
        )
        back_after = time.monotonic() - killed
        assert ack.seq == 4  # the stream kept its three messages
        info = await eventlog.js.stream_info(subjects.EVENTS_STREAM)
        assert info.state.messages == 4
        # nats-py's default reconnect_time_wait alone would keep the client away 2 s.
        assert back_after < 2.0, back_after
    finally:
        await eventlog.close()
    assert not pid_alive(victim)


@pytest.fixture
async def postgres_keeper(tmp_path: Path) -> AsyncIterator[ServerKeeper]:
    keeper = ServerKeeper(EmbeddedPostgres(tmp_path))
    await keeper.start()
    try:
        yield keeper
    finally:
        await keeper.stop()


async def _answers(pool: asyncpg.Pool) -> bool:
    # A pooled connection cut by the crash fails once; the pool replaces it.
    try:
        return bool(await pool.fetchval("SELECT count(*) FROM kept"))
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return False


async def test_a_killed_postmaster_comes_back_on_its_socket_with_its_data(
    postgres_keeper: ServerKeeper,
) -> None:
    server = postgres_keeper.server
    assert isinstance(server, EmbeddedPostgres)
    url, postmaster = server.url, postgres_keeper.pid
    assert postmaster is not None
    pool = await asyncpg.create_pool(url, min_size=2, max_size=2)
    try:
        await pool.execute("CREATE TABLE kept (n int)")
        await pool.execute("INSERT INTO kept VALUES (1), (2)")
        # A backend busy in a query when its postmaster dies: it must not hold the data
        # folder (shared memory, lock files) against the restart.
        busy = asyncio.ensure_future(pool.execute("SELECT pg_sleep(30)"))
        await until(lambda: _query_running(pool, "pg_sleep"), "the sleeping query runs")

        os.kill(postmaster, signal.SIGKILL)
        await asyncio.wait_for(postgres_keeper.wait_for_restarts(1), DEADLINE)
        assert postgres_keeper.pid not in (None, postmaster)
        assert server.url == url
        with pytest.raises((OSError, asyncpg.PostgresError, asyncpg.InterfaceError)):
            await busy

        await until(lambda: _answers(pool), "the pool answers again")
        assert await pool.fetchval("SELECT sum(n) FROM kept") == 3

        # One backend killed: Postgres itself resets every session and recovers; the
        # postmaster lives on, so nothing is restarted.
        victim = await pool.fetchval("SELECT pg_backend_pid()")
        restarted = postgres_keeper.pid
        os.kill(victim, signal.SIGKILL)
        await until(lambda: _answers(pool), "the pool answers after the backend's death")
        await pool.execute("INSERT INTO kept VALUES (3)")
        assert await pool.fetchval("SELECT sum(n) FROM kept") == 6
        assert postgres_keeper.pid == restarted
        assert postgres_keeper.restarts == 1
    finally:
        await pool.close()


async def _query_running(pool: asyncpg.Pool, text: str) -> bool:
    sql = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE $1 AND pid <> pg_backend_pid()"
    return bool(await pool.fetchval(sql, f"%{text}%"))


# -- the supervisor as `make run` runs it --------------------------------------------------


class _Ready(asyncio.DatagramProtocol):
    """The receiving end of the supervisor's sd_notify READY=1."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()

    def datagram_received(self, data: bytes, addr: object) -> None:
        if b"READY=1" in data:
            self.ready.set()


class MakeRun:
    """`python -m o_devtools.supervisor` on a data folder, and every pid it is seen to start."""

    def __init__(self, tmp_path: Path) -> None:
        self.data = tmp_path / "data"
        self.log = tmp_path / "supervisor.log"
        self.notify_socket = tmp_path / "notify.sock"
        self.proc: asyncio.subprocess.Process | None = None
        self.seen: dict[int, str | None] = {}  # pid -> start time

    @property
    def nats_pid_file(self) -> Path:
        return self.data / "nats" / "nats-server.pid"

    @property
    def postmaster_pid_file(self) -> Path:
        return self.data / "postgres" / "postmaster.pid"

    async def start(self, *, wait_ready: bool = True) -> None:
        loop = asyncio.get_running_loop()
        transport, ready = await loop.create_datagram_endpoint(
            _Ready, local_addr=str(self.notify_socket), family=socket.AF_UNIX
        )
        env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL")}
        env |= {
            "O_DATA_DIR": str(self.data),
            "O_SERVICES": "gateway",
            "O_HTTP_PORT": "0",
            "NOTIFY_SOCKET": str(self.notify_socket),
            # This checkout's code, whatever checkout the venv was installed from.
            "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("contracts", "services", ".")),
        }
        # A file, not a pipe: asyncio's wait() would also wait for children holding a pipe.
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "o_devtools.supervisor", env=env, stdout=out, stderr=out
            )
        try:
            if wait_ready:
                waiting = asyncio.ensure_future(ready.ready.wait())
                exited = asyncio.ensure_future(self.proc.wait())
                await asyncio.wait(
                    [waiting, exited], timeout=DEADLINE, return_when=asyncio.FIRST_COMPLETED
                )
                exited.cancel()
                if not waiting.done():
                    waiting.cancel()
                    pytest.fail(f"supervisor not ready:\n{self.log_text()}")
                self.note_pids()
        finally:
            transport.close()
            self.notify_socket.unlink(missing_ok=True)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def note_pids(self) -> list[int]:
        """Record the pids of the services and servers running now; return them."""
        now = []
        with contextlib.suppress(OSError, ValueError, KeyError):
            state = json.loads((self.data / "supervisor.json").read_text())
            now += [pid for pid, _ in state["children"]]
        for pid_file in (self.nats_pid_file, self.postmaster_pid_file):
            with contextlib.suppress(OSError, ValueError, IndexError):
                now.append(int(pid_file.read_text().split()[0]))
        for pid in now:
            self.seen.setdefault(pid, _start_time(pid))
        return now

    def survivors(self) -> list[str]:
        """What is still running of what we saw, or of anything in the data folder."""
        left = [
            f"{pid} {' '.join(_cmdline(pid))}"
            for pid, start in self.seen.items()
            if start is not None and _start_time(pid) == start
        ]
        return left + _processes_in(self.data)

    async def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.note_pids()
        self.proc.send_signal(sig)
        try:
            return await asyncio.wait_for(self.proc.wait(), DEADLINE)
        except TimeoutError:
            pytest.fail(f"supervisor not stopped {DEADLINE}s after {sig.name}:\n{self.log_text()}")

    def cleanup(self) -> None:
        """Only does something when a test failed half-way."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
        for line in self.survivors():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)


async def _bound(port: int) -> socket.socket:
    listening: list[socket.socket] = []

    def bind() -> bool:
        with contextlib.suppress(OSError):
            listening.append(socket.create_server(("127.0.0.1", port)))
        return bool(listening)

    await until(bind, f"port {port} free")
    return listening[0]


def _state(proc: asyncio.subprocess.Process | None) -> str:
    assert proc is not None
    return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _cmdline(pid: int) -> list[str]:
    with contextlib.suppress(OSError):
        return (Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")).split("\0")
    return []


def _processes_in(data: Path) -> list[str]:
    """Live processes naming the data folder, or running in it (Postgres backends do)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not pid_alive(int(entry.name)):
            continue
        with contextlib.suppress(OSError):
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(entry / "cwd")
            if str(data) in cmd or cwd.startswith(str(data)):
                found.append(f"{entry.name} {cmd}")
    return found


@pytest.fixture
async def make_run(tmp_path: Path) -> AsyncIterator[MakeRun]:
    run = MakeRun(tmp_path)
    try:
        yield run
    finally:
        run.cleanup()


async def test_stopping_while_servers_are_down_and_restarting_leaves_nothing(
    make_run: MakeRun,
) -> None:
    await make_run.start()
    nats_pid, postmaster = make_run.note_pids()[-2:]
    nats_url = json.loads((make_run.data / "endpoints.json").read_text())["NATS_URL"]
    port = int(nats_url.rsplit(":", 1)[1])

    # Frozen, the supervisor sees both deaths at once when it resumes, and by then NATS's port
    # is taken: its restart fails and backs off while Postgres comes back.
    assert make_run.proc is not None
    make_run.proc.send_signal(signal.SIGSTOP)
    try:
        # (the signal is only queued when send_signal returns)
        await until(lambda: _state(make_run.proc) == "T", "the supervisor stopped")
        os.kill(nats_pid, signal.SIGKILL)
        os.kill(postmaster, signal.SIGKILL)
        # The port is free once all of nats-server's threads are gone (its main one may be a
        # zombie before that).
        squatter = await _bound(port)
    finally:
        make_run.proc.send_signal(signal.SIGCONT)
    with squatter:
        await until(lambda: "postgres is back" in make_run.log_text(), "postgres restarted")
        await until(
            lambda: "nats-server failed to start" in make_run.log_text(), "a NATS restart failed"
        )
        make_run.note_pids()
        assert await make_run.stop() == 0, make_run.log_text()
    assert make_run.survivors() == []


async def test_stopping_during_startup_leaves_nothing(make_run: MakeRun) -> None:
    await make_run.start(wait_ready=False)
    # NATS spawned: the supervisor is in the middle of starting its servers.
    await until(make_run.nats_pid_file.exists, "nats-server spawned")
    # (Postgres is then in its first initdb, most likely: the stop ends it, not waits for it.)
    assert await make_run.stop() == 0, make_run.log_text()
    assert make_run.survivors() == []
    # What the stopped start left (a cluster half made, say) serves the next start.
    await make_run.start()
    assert await make_run.stop() == 0, make_run.log_text()
    assert make_run.survivors() == []


async def test_a_killed_supervisor_takes_its_children_along_and_the_data_stays_usable(
    make_run: MakeRun,
) -> None:
    await make_run.start()
    children = make_run.note_pids()
    assert len(children) == 3  # the gateway, nats-server, the postmaster
    assert make_run.proc is not None
    make_run.proc.kill()
    await make_run.proc.wait()
    # The parent-death signal: nothing waits for a next `make run` to clean up.
    await until(lambda: not make_run.survivors(), f"children gone: {make_run.survivors()}")

    # The folder a killed run left (stale pid files, a postmaster killed mid-way) serves again.
    await make_run.start()
    postmaster = int(make_run.postmaster_pid_file.read_text().split()[0])
    assert postmaster not in children
    assert await make_run.stop(signal.SIGINT) == 0, make_run.log_text()
    assert make_run.survivors() == []
