"""Spare processes (o_runtime/standby.py, o_devtools/supervisor.py): a loaded spare takes a
dead replica's place at once, a new spare follows, a spare connects to nothing before it is
promoted, and nothing is left running after a stop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from o_devtools.embedded import pid_alive
from o_devtools.supervisor import ServiceSpec, Supervisor
from o_runtime.standby import READY_FD_ENV, STANDBY_ENV

SERVICES = str(Path(__file__).resolve().parents[2] / "services")
DEADLINE = 20.0

# A service in miniature: as a spare it says it is loaded and waits for its word, then
# records that it was promoted; as a replica (or once promoted) it sleeps.
SERVICE = (
    sys.executable,
    "-c",
    "import os, sys, time\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from o_runtime.standby import is_spare, promoted, say_loaded\n"
    "if is_spare(os.environ):\n"
    "    say_loaded(os.environ)\n"
    "    if not promoted():\n"
    "        raise SystemExit(0)\n"
    "    open(os.path.join(sys.argv[2], str(os.getpid())), 'w').close()\n"
    "time.sleep(600)\n",
    SERVICES,
)


async def gone(pid: int) -> None:
    """Return once the process has died (its pidfd turns readable; it need not be ours)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    died = loop.create_future()
    loop.add_reader(fd, lambda: died.done() or died.set_result(None))
    try:
        await died
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def test_a_killed_replica_is_replaced_by_its_loaded_spare_and_a_new_spare_follows(
    tmp_path: Path,
) -> None:
    state_file = tmp_path.parent / f"{tmp_path.name}-supervisor.json"
    sup = Supervisor(
        [ServiceSpec("svc", (*SERVICE, str(tmp_path)), spare=True)],
        dict(os.environ),
        stable_after=0.0,  # every exit is an isolated crash: restarted at once
        spare_after=0.0,
        state_file=state_file,
    )
    await sup.start()
    try:
        await asyncio.wait_for(sup.wait_spare_loaded("svc"), DEADLINE)
        spare = sup.spare_pid("svc")
        [first] = sup.pids("svc")
        assert spare is not None and spare != first
        assert os.listdir(tmp_path) == []  # loaded, not started
        # The state file tells the spare from the replica (the chaos suite kills replicas).
        state = json.loads(state_file.read_text())
        assert {pid for pid, _ in state["children"]} == {first, spare}
        assert state["spares"] == [spare]

        os.kill(first, signal.SIGKILL)
        await asyncio.wait_for(sup.wait_for_restarts("svc", 1), DEADLINE)
        assert sup.pids("svc") == [spare]

        await asyncio.wait_for(sup.wait_spare_loaded("svc"), DEADLINE)
        second_spare = sup.spare_pid("svc")
        assert second_spare is not None and second_spare not in (first, spare)
        # The promoted spare is a replica now.
        assert json.loads(state_file.read_text())["spares"] == [second_spare]
        # The promoted one ran on past its word (it recorded it); the new spare waits.
        assert os.listdir(tmp_path) == [str(spare)]
    finally:
        await asyncio.wait_for(sup.stop(), 15.0)
    assert not pid_alive(spare) and not pid_alive(second_spare)
    assert sup.pids("svc") == [] and sup.spare_pid("svc") is None


async def test_a_spare_that_dies_is_replaced(tmp_path: Path) -> None:
    sup = Supervisor(
        [ServiceSpec("svc", (*SERVICE, str(tmp_path)), spare=True)],
        dict(os.environ),
        spare_after=0.0,
    )
    await sup.start()
    try:
        await asyncio.wait_for(sup.wait_spare_loaded("svc"), DEADLINE)
        spare = sup.spare_pid("svc")
        assert spare is not None
        os.kill(spare, signal.SIGKILL)
        await asyncio.wait_for(gone(spare), DEADLINE)  # (a kill takes a moment to land)
        await asyncio.wait_for(sup.wait_spare_loaded("svc"), DEADLINE)
        assert sup.spare_pid("svc") not in (None, spare)
        assert os.listdir(tmp_path) == []  # nobody was promoted
    finally:
        await asyncio.wait_for(sup.stop(), 15.0)


async def test_a_replica_that_dies_before_its_spare_exists_starts_cold(tmp_path: Path) -> None:
    sup = Supervisor(
        [ServiceSpec("svc", (*SERVICE, str(tmp_path)), spare=True)],
        dict(os.environ),
        stable_after=0.0,
        spare_after=600.0,  # not within this test
    )
    await sup.start()
    try:
        [first] = sup.pids("svc")
        os.kill(first, signal.SIGKILL)
        await asyncio.wait_for(sup.wait_for_restarts("svc", 1), DEADLINE)
        [second] = sup.pids("svc")
        assert second != first and sup.spare_pid("svc") is None
        assert os.listdir(tmp_path) == []
    finally:
        await asyncio.wait_for(sup.stop(), 15.0)


def test_a_real_services_spare_loads_without_connecting_and_exits_at_the_end_of_input() -> None:
    # NATS and Postgres addresses where this test listens: a spare must not connect to either
    # before its word, nor need them to load.
    with socket.socket() as nats_port, socket.socket() as pg_port:
        for listener in (nats_port, pg_port):
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            listener.setblocking(False)
        read_end, write_end = os.pipe()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([SERVICES, str(Path(SERVICES).parent / "contracts")]),
            "NATS_URL": f"nats://127.0.0.1:{nats_port.getsockname()[1]}",
            "DATABASE_URL": f"postgresql://o@127.0.0.1:{pg_port.getsockname()[1]}/o",
            "OPENAI_API_KEY": "sk-test",
            STANDBY_ENV: "1",
            READY_FD_ENV: str(write_end),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "o_executor"],
            env=env,
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_end,),
        )
        os.close(write_end)
        try:
            with os.fdopen(read_end, "rb") as said:
                assert said.read() == b"loaded\n"
            assert proc.poll() is None
            for listener in (nats_port, pg_port):
                try:
                    listener.accept()
                    raise AssertionError("the spare connected before it was promoted")
                except BlockingIOError:
                    pass
            assert proc.stdin is not None
            proc.stdin.close()
            assert proc.wait(DEADLINE) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.stderr is not None
        assert b"Traceback" not in proc.stderr.read()
