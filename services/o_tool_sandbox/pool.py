"""A warm pool of single-use worker processes, and running one tool call in one of them.

Workers are forked from a zygote (zygote.py: ~1 ms instead of ~20 ms for a
new interpreter), and a few are started ahead, each already confined and
waiting on stdin for its one job. A worker is never reused: every call gets
a fresh process, a fresh uid and a fresh scratch directory, removed with the
process when the call ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from o_runtime.instruments import SandboxUse
from o_tool_sandbox import interpreter
from o_tool_sandbox.limits import Limits, NetworkAccess

log = logging.getLogger(__name__)

ZYGOTE = str(Path(__file__).with_name("zygote.py"))
# Tools run as uids from `uid_base` on (root only): one per live worker.
UID_SLOTS = 1000
# Replicas on one host take a random block of UID_SLOTS uids each, so two
# replicas' tools (almost surely) never share a uid.
UID_BLOCKS = 1000
SCRATCH_PREFIX = "o-sandbox-"


@dataclass
class Outcome:
    ok: bool
    tool_return: str = ""
    error: str = ""
    failure: str = ""
    stdout: str = ""
    stderr: str = ""
    duration_ms: float = 0.0


@dataclass
class _Output:
    keep: int
    data: bytearray = field(default_factory=bytearray)
    total: int = 0

    def text(self) -> str:
        extra = self.total - len(self.data)
        tail = f"\n[... {extra} more bytes not kept]" if extra > 0 else ""
        return self.data.decode("utf-8", "replace") + tail


class Worker:
    def __init__(
        self,
        pid: int,
        stdin: asyncio.StreamWriter,
        stdout: asyncio.StreamReader,
        stderr: asyncio.StreamReader,
        results: asyncio.StreamReader,
        exited: asyncio.Future[int],
        uid: int | None,
        scratch: Path,
    ) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.results = results
        self.exited = exited
        self.uid = uid
        self.scratch = scratch
        self.isolation: dict[str, Any] = {}

    def kill(self) -> None:
        # The whole process group: the worker and, without a PID namespace,
        # whatever it started (with one, the kernel kills those with PID 1).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)


class ZygoteExited(RuntimeError):
    """The zygote died before it forked the worker asked for."""


class Zygote:
    """The forking process (zygote.py) and the control socket to it."""

    def __init__(self, python: str) -> None:
        self.python = python
        self.proc: asyncio.subprocess.Process | None = None
        self.sock: socket.socket | None = None
        self._spawns: dict[int, asyncio.Future[tuple[int, asyncio.Future[int]]]] = {}
        self._exits: dict[int, asyncio.Future[int]] = {}
        self._refs = itertools.count(1)
        self._reader: asyncio.Task[None] | None = None
        # Its socket refused a request: it died (its exit may not be reaped yet).
        self._refused = False

    async def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                self.python,
                "-I",
                "-S",
                ZYGOTE,
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                # Nothing of O's environment: no NATS_URL, keys, tokens.
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                start_new_session=True,
            )
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock = ours
        self._reader = asyncio.create_task(self._read())

    @property
    def alive(self) -> bool:
        return (
            self.proc is not None
            and self.proc.returncode is None
            and self.sock is not None
            and not self._refused
        )

    async def _read(self) -> None:
        assert self.sock is not None
        loop = asyncio.get_running_loop()
        try:
            while data := await _recv(loop, self.sock):
                message = json.loads(data)
                if "exited" in message:
                    future = self._exits.pop(message["exited"], None)
                    if future is not None and not future.done():
                        future.set_result(int(message["code"]))
                else:
                    spawned = self._spawns.pop(message["ref"], None)
                    if spawned is not None and not spawned.done():
                        # The worker's exit is awaited from here on, not from when fork()
                        # resumes: its exit, or the zygote's death (the end of this
                        # loop), may be read before that, and would then be missed.
                        pid = int(message["pid"])
                        exited: asyncio.Future[int] = loop.create_future()
                        # Mark a failure as seen even if nobody waits for this exit.
                        exited.add_done_callback(lambda f: f.cancelled() or f.exception())
                        self._exits[pid] = exited
                        spawned.set_result((pid, exited))
        finally:
            # The zygote is gone: nobody will report these any more.
            for asked in self._spawns.values():
                if not asked.done():
                    asked.set_exception(ZygoteExited("the sandbox zygote exited"))
            for status in self._exits.values():
                if not status.done():
                    status.set_exception(RuntimeError("the sandbox zygote exited"))
            self.sock = None

    async def fork(self, config: dict[str, Any], fds: list[int]) -> tuple[int, asyncio.Future[int]]:
        """A new worker's pid, and its exit status to come (failed if the zygote dies)."""
        if self.sock is None:
            raise ZygoteExited("the sandbox zygote exited")
        loop = asyncio.get_running_loop()
        ref = next(self._refs)
        spawned: asyncio.Future[tuple[int, asyncio.Future[int]]] = loop.create_future()
        self._spawns[ref] = spawned
        try:
            socket.send_fds(self.sock, [json.dumps({"ref": ref, "config": config}).encode()], fds)
        except OSError as exc:  # it died, and its end of the socket with it
            self._spawns.pop(ref, None)
            self._refused = True
            raise ZygoteExited(f"the sandbox zygote exited ({exc})") from exc
        return await asyncio.wait_for(spawned, timeout=30)

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        if self._reader is not None:
            self._reader.cancel()
        if self.sock is not None:
            self.sock.close()


# What a tool let out to the network reads: name resolution and the system's certificates.
NETWORK_FILES = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/usr/share/ca-certificates",
)


class WorkerPool:
    def __init__(
        self,
        limits: Limits,
        uid_base: int = 61000,
        python: str | None = None,
        network: NetworkAccess | None = None,
        extra_read_paths: tuple[str, ...] = (),
    ) -> None:
        """`extra_read_paths`: folders every tool may read too (the installed packages)."""
        self.limits = limits
        self.network = network or NetworkAccess()
        self.root = os.geteuid() == 0
        self.python, self.read_paths = interpreter.choose(unprivileged=self.root, python=python)
        if self.network.enabled:
            self.read_paths += [p for p in NETWORK_FILES if os.path.exists(p)]
        self.read_paths += list(extra_read_paths)
        _sweep_stale_scratch()
        self.base = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
        # Traversable, not listable: a tool finds only its own scratch directory.
        self.base.chmod(0o711)
        self._ready: asyncio.Queue[Worker] = asyncio.Queue()
        self._uids: set[int] = set()
        self._uid_base = uid_base + secrets.randbelow(UID_BLOCKS) * UID_SLOTS
        self._filling: set[asyncio.Task[None]] = set()
        self._disposing: set[asyncio.Task[None]] = set()
        self.isolation: dict[str, Any] = {}
        # Workers running a tool now.
        self.busy = 0
        self._closed = False
        self._zygote = Zygote(self.python)
        self._zygote_lock = asyncio.Lock()

    def use(self) -> SandboxUse:
        """Workers ready and busy, and how many are kept ready (the sandbox's metrics)."""
        return SandboxUse(self._ready.qsize(), self.busy, self.limits.pool_size)

    async def start(self) -> None:
        # One worker first, so we know (and can report) what this host enforces.
        worker = await self._spawn()
        self._ready.put_nowait(worker)
        self._refill()

    async def close(self) -> None:
        self._closed = True
        for task in list(self._filling):
            task.cancel()
        while not self._ready.empty():
            await self._dispose(self._ready.get_nowait())
        await asyncio.gather(*self._disposing, return_exceptions=True)
        await self._zygote.close()
        shutil.rmtree(self.base, ignore_errors=True)

    def _refill(self) -> None:
        missing = self.limits.pool_size - self._ready.qsize() - len(self._filling)
        for _ in range(max(missing, 0)):
            task = asyncio.create_task(self._fill_one())
            self._filling.add(task)
            task.add_done_callback(self._filling.discard)

    async def _fill_one(self) -> None:
        try:
            worker = await self._spawn()
        except Exception:
            log.exception("could not start a sandbox worker")
            return
        if self._closed:
            await self._dispose(worker)
        else:
            self._ready.put_nowait(worker)

    def _take_uid(self) -> int | None:
        if not self.root:
            return None
        for uid in range(self._uid_base, self._uid_base + UID_SLOTS):
            if uid not in self._uids:
                self._uids.add(uid)
                return uid
        raise RuntimeError("no free sandbox uid")

    def lease_uid(self) -> int | None:
        """A uid of this replica's range for a long-lived process (a stdio MCP server)."""
        return self._take_uid()

    def release_uid(self, uid: int | None) -> None:
        if uid is not None:
            self._uids.discard(uid)

    async def _zygote_ready(self) -> Zygote:
        async with self._zygote_lock:
            if not self._zygote.alive:
                await self._zygote.close()
                self._zygote = Zygote(self.python)
                await self._zygote.start()
            return self._zygote

    async def _spawn(self) -> Worker:
        zygote = await self._zygote_ready()
        uid = self._take_uid()
        scratch = Path(tempfile.mkdtemp(dir=self.base))
        if uid is not None:
            os.chown(scratch, uid, uid)
        config = {
            "scratch": str(scratch),
            "uid": uid,
            "read_paths": self.read_paths,
            "limits": self.limits.worker_config(),
            "network": self.network.worker_config(),
        }
        pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, result
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1]]
        ours = [pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0]]
        try:
            pid, exited = await zygote.fork(config, theirs)
        except BaseException:
            for fd in ours:
                os.close(fd)
            if uid is not None:
                self._uids.discard(uid)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        loop = asyncio.get_running_loop()
        readers = []
        for fd in ours[1:]:
            readers.append(await _read_pipe(loop, fd))
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(ours[0], "wb", 0)
        )
        stdin = asyncio.StreamWriter(transport, protocol, None, loop)
        worker = Worker(pid, stdin, readers[0], readers[1], readers[2], exited, uid, scratch)
        try:
            line = await asyncio.wait_for(worker.results.readline(), timeout=30)
            worker.isolation = json.loads(line)["ready"]
        except (TimeoutError, ValueError, KeyError) as exc:
            err = await _drain(worker.stderr)
            await self._dispose(worker)
            raise RuntimeError(f"sandbox worker did not start: {exc!r} {err[-500:]!r}") from exc
        self.isolation = worker.isolation
        return worker

    async def _dispose(self, worker: Worker) -> None:
        worker.kill()
        worker.stdin.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(worker.exited), timeout=10)
        shutil.rmtree(worker.scratch, ignore_errors=True)
        if worker.uid is not None:
            self._uids.discard(worker.uid)

    async def _worker(self) -> Worker:
        """A live worker: a ready one, else a new one (from a new zygote if it died)."""
        zygote_deaths = 0
        while True:
            if not self._ready.empty():
                worker = self._ready.get_nowait()
            else:
                try:
                    worker = await self._spawn()
                except ZygoteExited:
                    # Killed while it forked ours: the next spawn starts another.
                    zygote_deaths += 1
                    if zygote_deaths > 1:
                        raise
                    continue
            if not worker.exited.done():
                return worker
            # It died waiting (its zygote was killed, say): take another.
            await self._dispose(worker)

    async def run(
        self,
        source: str,
        name: str,
        args: dict[str, Any],
        env: dict[str, str],
        timeout: float,
        paths: list[str] | None = None,
    ) -> Outcome:
        """`paths`: folders of installed packages put on the tool's path."""
        worker = await self._worker()
        self._refill()
        self.busy += 1
        try:
            return await self._run_in(worker, source, name, args, env, timeout, paths or [])
        finally:
            self.busy -= 1
            # Cleaning up (reaping, removing the scratch folder) is off the
            # caller's path; the worker is already dead or being killed.
            task = asyncio.create_task(self._dispose(worker))
            self._disposing.add(task)
            task.add_done_callback(self._disposing.discard)

    async def _run_in(
        self,
        worker: Worker,
        source: str,
        name: str,
        args: dict[str, Any],
        env: dict[str, str],
        timeout: float,
        paths: list[str],
    ) -> Outcome:
        job = json.dumps(
            {"source": source, "name": name, "args": args, "env": env, "paths": paths}
        ).encode()
        out, err = _Output(self.limits.output_keep), _Output(self.limits.output_keep)
        flooded = asyncio.Event()
        loop = asyncio.get_running_loop()
        started = loop.time()

        async def pump(stream: asyncio.StreamReader, into: _Output) -> None:
            while chunk := await stream.read(65536):
                room = into.keep - len(into.data)
                if room > 0:
                    into.data += chunk[:room]
                into.total += len(chunk)
                if out.total + err.total > self.limits.output_max:
                    flooded.set()
                    worker.kill()
                    return

        pumps = [
            asyncio.create_task(pump(worker.stdout, out)),
            asyncio.create_task(pump(worker.stderr, err)),
        ]
        result_line = b""
        code: int | None = None
        timed_out = False
        try:
            async with asyncio.timeout(min(timeout, self.limits.timeout)):
                worker.stdin.write(job)
                with contextlib.suppress(ConnectionError):
                    await worker.stdin.drain()
                worker.stdin.close()
                try:
                    result_line = await worker.results.readline()
                except ValueError:  # a result line over the reader's limit
                    flooded.set()
                    worker.kill()
                with contextlib.suppress(RuntimeError):  # the zygote died: no status
                    code = await asyncio.shield(worker.exited)
                await asyncio.gather(*pumps)
        except TimeoutError:
            timed_out = True
        finally:
            worker.kill()
            for task in pumps:
                task.cancel()
        elapsed = (loop.time() - started) * 1000
        base = Outcome(ok=False, stdout=out.text(), stderr=err.text(), duration_ms=elapsed)
        if flooded.is_set():
            base.failure, base.error = (
                "output_limit",
                f"the tool wrote over {self.limits.output_max} bytes of output and was stopped",
            )
            return base
        if timed_out:
            base.failure, base.error = (
                "timeout",
                f"the tool ran longer than {min(timeout, self.limits.timeout):g}s and was stopped",
            )
            return base
        try:
            result = json.loads(result_line)
        except ValueError:
            return self._died(base, code)
        base.duration_ms = float(result.get("duration_ms", elapsed))
        if result.get("ok"):
            base.ok, base.tool_return = True, str(result.get("return", ""))
        else:
            base.failure = str(result.get("failure") or "exception")
            base.error = str(result.get("error") or "the tool failed")
        return base

    def _died(self, base: Outcome, code: int | None) -> Outcome:
        # With a PID namespace the waiting parent exits 128+signal of PID 1.
        sig = -code if code is not None and code < 0 else (code - 128 if code and code > 128 else 0)
        if sig == signal.SIGXCPU:
            base.failure = "cpu_limit"
            base.error = (
                f"the tool used more than {self.limits.cpu_seconds}s of CPU and was stopped"
            )
        elif sig == signal.SIGKILL:
            base.failure = "crashed"
            base.error = "the tool was killed (SIGKILL), possibly for exceeding a limit"
        else:
            base.failure = "crashed"
            base.error = f"the tool's process ended without a result (exit status {code})"
        return base


async def _drain(stream: asyncio.StreamReader | None) -> bytes:
    if stream is None:
        return b""
    try:
        return await asyncio.wait_for(stream.read(4096), timeout=1)
    except TimeoutError:
        return b""


def _sweep_stale_scratch() -> None:
    """Remove scratch folders of sandbox processes that died without cleaning up (kill -9)."""
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = path.name.removeprefix(SCRATCH_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(path, ignore_errors=True)


async def _read_pipe(loop: asyncio.AbstractEventLoop, fd: int) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=2**20)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0)
    )
    return reader


async def _recv(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    try:
        return await loop.sock_recv(sock, 65536)
    except OSError:  # reset: the zygote died
        return b""
