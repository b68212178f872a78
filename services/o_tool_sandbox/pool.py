"""A warm pool of single-use worker processes, and running one tool call in one of them.

Starting a confined interpreter takes tens of milliseconds, so a few workers
are started ahead, each already confined and waiting on stdin for its one
job. A worker is never reused: every call gets a fresh process, a fresh uid
and a fresh scratch directory, removed with the process when the call ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from o_tool_sandbox import interpreter
from o_tool_sandbox.limits import Limits

log = logging.getLogger(__name__)

WORKER = str(Path(__file__).with_name("worker.py"))
# Tools run as uids from here on (root only): one per live worker.
UID_BASE = int(os.environ.get("O_SANDBOX_UID_BASE", "61000"))
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
        proc: asyncio.subprocess.Process,
        results: asyncio.StreamReader,
        uid: int | None,
        scratch: Path,
        isolation: dict[str, Any],
    ) -> None:
        self.proc = proc
        self.results = results
        self.uid = uid
        self.scratch = scratch
        self.isolation = isolation

    def kill(self) -> None:
        # The whole process group: the worker and, without a PID namespace,
        # whatever it started (with one, the kernel kills those with PID 1).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)


class WorkerPool:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.root = os.geteuid() == 0
        self.python, self.read_paths = interpreter.choose(unprivileged=self.root)
        _sweep_stale_scratch()
        self.base = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
        # Traversable, not listable: a tool finds only its own scratch directory.
        self.base.chmod(0o711)
        self._ready: asyncio.Queue[Worker] = asyncio.Queue()
        self._uids: set[int] = set()
        self._uid_base = UID_BASE + secrets.randbelow(UID_BLOCKS) * UID_SLOTS
        self._filling: set[asyncio.Task[None]] = set()
        self._disposing: set[asyncio.Task[None]] = set()
        self.isolation: dict[str, Any] = {}
        self._closed = False

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

    async def _spawn(self) -> Worker:
        uid = self._take_uid()
        scratch = Path(tempfile.mkdtemp(dir=self.base))
        if uid is not None:
            os.chown(scratch, uid, uid)
        read_end, write_end = os.pipe()
        config = {
            "result_fd": write_end,
            "scratch": str(scratch),
            "uid": uid,
            "read_paths": self.read_paths,
            "limits": self.limits.worker_config(),
        }
        try:
            proc = await asyncio.create_subprocess_exec(
                self.python,
                "-I",
                "-S",
                WORKER,
                json.dumps(config),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(write_end,),
                # Nothing of O's environment: no NATS_URL, keys, tokens.
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                start_new_session=True,
            )
        finally:
            os.close(write_end)
        loop = asyncio.get_running_loop()
        results = asyncio.StreamReader(limit=2**20)
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(results), os.fdopen(read_end, "rb", 0)
        )
        worker = Worker(proc, results, uid, scratch, {})
        try:
            line = await asyncio.wait_for(results.readline(), timeout=30)
            worker.isolation = json.loads(line)["ready"]
        except (TimeoutError, ValueError, KeyError) as exc:
            err = await _drain(proc.stderr)
            await self._dispose(worker)
            raise RuntimeError(f"sandbox worker did not start: {exc!r} {err[-500:]!r}") from exc
        self.isolation = worker.isolation
        return worker

    async def _dispose(self, worker: Worker) -> None:
        worker.kill()
        with contextlib.suppress(ProcessLookupError):
            await worker.proc.wait()
        shutil.rmtree(worker.scratch, ignore_errors=True)
        if worker.uid is not None:
            self._uids.discard(worker.uid)

    async def run(
        self, source: str, name: str, args: dict[str, Any], env: dict[str, str], timeout: float
    ) -> Outcome:
        worker = await self._ready.get() if not self._ready.empty() else await self._spawn()
        self._refill()
        try:
            return await self._run_in(worker, source, name, args, env, timeout)
        finally:
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
    ) -> Outcome:
        proc = worker.proc
        assert proc.stdin and proc.stdout and proc.stderr
        job = json.dumps({"source": source, "name": name, "args": args, "env": env}).encode()
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
            asyncio.create_task(pump(proc.stdout, out)),
            asyncio.create_task(pump(proc.stderr, err)),
        ]
        result_line = b""
        timed_out = False
        try:
            async with asyncio.timeout(min(timeout, self.limits.timeout)):
                proc.stdin.write(job)
                with contextlib.suppress(ConnectionError):
                    await proc.stdin.drain()
                proc.stdin.close()
                result_line = await worker.results.readline()
                await proc.wait()
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
            return self._died(base, proc.returncode)
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
