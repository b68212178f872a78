"""One running stdio MCP server, spoken to through the official `mcp` SDK's stdio client.

The SDK's `stdio_client` spawns mcp_launch.py (which confines itself and becomes the
server) and owns the pipes; a `ClientSession` over them speaks MCP. Both are async
context managers that must be entered and left in one task, so one owner task holds
them for the server's life, and callers from any task send requests on the session
(it multiplexes them).

The server's stderr is read here, bounded: its first line says what confinement
applied; the last lines are kept as the reason when it dies. The end of stderr means
the server is gone (its init and every process it started hold it open until then);
it also ends every call waiting on it, at once, with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from o_tool_sandbox.mcp_launch import CONFIG_VARIABLE, CONFINED_PREFIX

log = logging.getLogger(__name__)

LAUNCHER = str(Path(__file__).with_name("mcp_launch.py"))
T = TypeVar("T")
# Bytes of the server's stderr kept for the reason it gives when it fails.
STDERR_KEPT = 2048
# After a call timed out, the server must answer a ping this soon or it is stopped.
PING_SECONDS = 5.0
# How long the SDK's shutdown (close stdin, SIGTERM, SIGKILL) may take before we cancel it.
STOP_SECONDS = 10.0


class StdioFailure(Exception):
    """The server could not be asked; the message is the reason, for the agent."""


@dataclass(frozen=True)
class Launch:
    """Everything needed to start one server, decided by the manager (mcp_servers.py)."""

    server_id: str
    fingerprint: str  # of its command, arguments and environment: a change restarts it
    python: str  # the interpreter that runs mcp_launch.py
    config: dict[str, Any]  # mcp_launch.py's settings (command, env, paths, limits, ...)
    start_seconds: float
    # Why it may not reach its command or files (mcp_paths.out_of_reach), told with the
    # reason when it never starts.
    out_of_reach: str | None = None


class _Tail:
    """The last lines of the server's stderr, bounded in bytes."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.lines: deque[str] = deque()
        self.size = 0

    def add(self, line: str) -> None:
        line = line[-self.keep :]
        self.lines.append(line)
        self.size += len(line)
        while self.size > self.keep and len(self.lines) > 1:
            self.size -= len(self.lines.popleft())

    def text(self) -> str:
        return " | ".join(x for x in self.lines if x)


class StdioProcess:
    def __init__(self, launch: Launch, cleanup: Callable[[], None]) -> None:
        self.launch = launch
        self._cleanup = cleanup
        self.session: Any = None
        self.isolation: dict[str, Any] = {}
        self.in_flight = 0
        self.last_used = time.monotonic()
        self.started_at = time.monotonic()
        self._ready = asyncio.Event()
        self._ended = asyncio.Event()
        self._stopping = asyncio.Event()
        self._cleaned = asyncio.Event()  # ended, and its scratch folder and uid given back
        self._reason = ""
        self._tail = _Tail(STDERR_KEPT)
        self._garbage: str | None = None
        self._owner: asyncio.Task[None] | None = None
        self._checks: set[asyncio.Task[None]] = set()

    @property
    def server_id(self) -> str:
        return self.launch.server_id

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    @property
    def idle(self) -> bool:
        # One still starting is not idle: its first caller waits for it, and a slow start
        # (a big SDK imported with no bytecode cache) must not be taken for disuse.
        # `start_seconds` bounds the start.
        return self.in_flight == 0 and self._ready.is_set()

    def reason(self) -> str:
        return self._reason + self._notes()

    def _notes(self) -> str:
        """What explains a failure: garbage on stdout, its stderr, and, for a server that
        never started, what it may not reach."""
        notes = ""
        if self._garbage:
            notes += f"; it wrote a line that is not MCP: {self._garbage}"
        said = self._tail.text()
        if said:
            notes += f"; its stderr: {said}"
        if self.launch.out_of_reach and not self._ready.is_set():
            notes += f"; likely why: {self.launch.out_of_reach}"
        return notes

    # Starting and stopping ---------------------------------------------------------

    def start(self) -> None:
        self._owner = asyncio.create_task(self._own(), name=f"mcp-stdio-{self.server_id}")

    async def ready(self, timeout: float) -> None:
        """Wait until it answered `initialize` (StdioFailure if it ended or is not ready)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_first(self._ready.wait(), self._ended.wait()), timeout)
        if self._ended.is_set():
            raise StdioFailure(self.reason())
        if not self._ready.is_set():
            raise StdioFailure(
                f"the MCP server was still starting after {timeout:g} s{self._notes()}"
            )

    async def finished(self) -> None:
        """Wait until the server is gone (stopped, crashed or failed to start) and
        cleaned up after."""
        await self._cleaned.wait()

    async def stop(self) -> None:
        self._stopping.set()
        owner = self._owner
        if owner is None:
            return
        if not self._ready.is_set():
            owner.cancel()  # stuck before `initialize` answered: nothing to wind down
        try:
            await asyncio.wait_for(asyncio.shield(owner), STOP_SECONDS)
        except TimeoutError:
            owner.cancel()
            with contextlib.suppress(BaseException):
                await owner
        except BaseException:
            pass  # its own failure is already its reason

    async def _own(self) -> None:
        from mcp import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        read_fd, write_fd = os.pipe()
        errlog = os.fdopen(write_fd, "w")
        reader = asyncio.create_task(self._read_stderr(read_fd))
        params = StdioServerParameters(
            command=self.launch.python,
            args=["-I", "-S", LAUNCHER],
            env={CONFIG_VARIABLE: json.dumps(self.launch.config)},
            cwd=self.launch.config["scratch"],
        )
        self._reason = "the MCP server was stopped"
        try:
            async with stdio_client(params, errlog=errlog) as (read, write):
                errlog.close()  # the server holds its own copy: its end is our EOF
                async with ClientSession(read, write, message_handler=self._on_message) as session:
                    try:
                        async with asyncio.timeout(self.launch.start_seconds):
                            await session.initialize()
                    except TimeoutError:
                        # We end it: its exit on the way out is not the reason.
                        self._stopping.set()
                        self._reason = (
                            "the MCP server did not answer `initialize` within "
                            f"{self.launch.start_seconds:g} s"
                        )
                        return
                    self.session = session
                    self.last_used = time.monotonic()  # idle from now, not from its start
                    self._ready.set()
                    await _first(self._stopping.wait(), self._ended.wait())
        except BaseException as exc:
            if isinstance(_innermost_exception(exc), asyncio.CancelledError):
                if not self._stopping.is_set():
                    raise
            elif not self._ready.is_set():
                # Died while starting? Its stderr ends soon after its stdout.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._ended.wait(), 2.0)
                self._reason = (
                    "the MCP server exited before it answered `initialize`"
                    if self._ended.is_set()
                    else f"the MCP server could not be started: {_innermost(exc)}"
                )
            else:
                self._reason = f"the MCP session failed: {_innermost(exc)}"
        finally:
            errlog.close()
            self._stopping.set()
            self._ended.set()
            reader.cancel()
            for task in self._checks:
                task.cancel()
            self._cleanup()
            self._cleaned.set()
            log.info("stdio MCP server %s ended: %s", self.server_id, self.reason())

    async def _read_stderr(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        stream = asyncio.StreamReader(limit=1 << 16)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(fd, "rb", 0)
        )
        try:
            while True:
                try:
                    raw = await stream.readline()
                except ValueError:  # a line past the limit: keep its end
                    raw = await stream.read(1 << 16)
                if not raw:
                    break
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if not self.isolation and line.startswith(CONFINED_PREFIX):
                    self.isolation = json.loads(line.removeprefix(CONFINED_PREFIX))
                    log.info("stdio MCP server %s confined: %s", self.server_id, self.isolation)
                else:
                    self._tail.add(line)
        finally:
            transport.close()
        # Every process of the server is gone (each held stderr open).
        if not self._stopping.is_set():
            self._reason = "the MCP server exited"
        self._ended.set()

    async def _on_message(self, message: Any) -> None:
        # Lines on stdout that are not JSON-RPC: the SDK skips them; we keep the first
        # as part of the reason if a call then gets no answer.
        if isinstance(message, Exception) and self._garbage is None:
            self._garbage = _one_line(str(message) or repr(message))

    # Asking ------------------------------------------------------------------------

    async def list_tools(self, timeout: float) -> list[Any]:
        async def ask(session: Any) -> list[Any]:
            listed = await session.list_tools()
            return list(listed.tools)

        return await self._ask(ask, timeout)

    async def call_tool(self, name: str, args: dict[str, Any], timeout: float) -> Any:
        async def ask(session: Any) -> Any:
            return await session.call_tool(name, args)

        return await self._ask(ask, timeout)

    async def _ask(self, work: Callable[[Any], Awaitable[T]], timeout: float) -> T:
        if self._ended.is_set() or self.session is None:
            raise StdioFailure(self.reason() if self._ended.is_set() else "not started")
        self.in_flight += 1
        call = asyncio.ensure_future(work(self.session))
        ended = asyncio.ensure_future(self._ended.wait())
        try:
            done, _ = await asyncio.wait(
                {call, ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if call in done:
                try:
                    return call.result()
                except Exception as exc:
                    # A closed connection is the server dying: its stderr says why.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(ended), 2.0)
                    if self._ended.is_set():
                        raise StdioFailure(self.reason()) from exc
                    raise StdioFailure(f"the MCP server answered: {_innermost(exc)}") from exc
            if ended in done:
                raise StdioFailure(self.reason())
            self._check_alive()
            raise StdioFailure(f"no answer within {timeout:g} s{self._notes()}")
        finally:
            call.cancel()
            ended.cancel()
            self.in_flight -= 1
            self.last_used = time.monotonic()

    def _check_alive(self) -> None:
        """After a call timed out: a server that does not answer a ping is stopped."""

        async def check() -> None:
            try:
                async with asyncio.timeout(PING_SECONDS):
                    await self.session.send_ping()
            except Exception:
                log.info("stdio MCP server %s did not answer a ping: stopping it", self.server_id)
                self._reason = (
                    f"the MCP server stopped answering (no ping within {PING_SECONDS:g} s)"
                )
                self._stopping.set()

        task = asyncio.create_task(check())
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)


async def _first(*waits: Awaitable[Any]) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _innermost_exception(exc: BaseException) -> BaseException:
    # anyio task groups wrap what happened inside them.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _innermost(exc: BaseException) -> str:
    exc = _innermost_exception(exc)
    text = _one_line(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _one_line(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."
