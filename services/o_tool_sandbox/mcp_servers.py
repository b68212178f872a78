"""The stdio MCP servers one sandbox replica runs: started on first use, stopped when idle.

A server is a long-lived child (mcp_process.py) keyed by its registry id. A request
finds it running, or starts it: a uid of its own (root only, from the tool pool's
range so the two never share one), a scratch folder of its own, what it may read
(mcp_paths.py), the limits (mcp_settings.py). A server whose command, arguments or
environment changed since it started is stopped and started again; one that crashed is
started again on its next use; one unused for `idle_seconds` is stopped. At most
`max_servers` run at once: a new one stops the least recently used idle one, and when
all are busy it is refused with the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from o_contracts.mcp_stdio import StdioServerSpec
from o_tool_sandbox import mcp_paths
from o_tool_sandbox.mcp_process import Launch, StdioFailure, StdioProcess
from o_tool_sandbox.mcp_settings import McpStdioSettings
from o_tool_sandbox.pool import WorkerPool

log = logging.getLogger(__name__)


def fingerprint(spec: StdioServerSpec) -> str:
    """What a running server was started with: a change means starting it again."""
    body = json.dumps([spec.command, spec.args, sorted(spec.encrypted_env.items())])
    return hashlib.sha256(body.encode()).hexdigest()


def server_env(scratch: str, env: dict[str, str]) -> dict[str, str]:
    """The server's environment: a clean base (its scratch folder as home) and its own."""
    base = {
        "PATH": mcp_paths.DEFAULT_PATH,
        "HOME": scratch,
        "TMPDIR": scratch,
        "LANG": "C.UTF-8",
    }
    return base | env


class StdioServers:
    def __init__(self, settings: McpStdioSettings, pool: WorkerPool) -> None:
        self.settings = settings
        self.pool = pool
        self.running: dict[str, StdioProcess] = {}
        self._lock = asyncio.Lock()
        self._stopping: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._reaper = asyncio.create_task(self._stop_idle_ones())

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        servers = list(self.running.values())
        self.running.clear()
        await asyncio.gather(*(s.stop() for s in servers), *self._stopping, return_exceptions=True)

    async def server(self, spec: StdioServerSpec, env: dict[str, str]) -> StdioProcess:
        """The running server for `spec` (started now if needed; it may still be starting).

        `env`: its environment, decrypted. Raises StdioFailure when it cannot be started.
        """
        async with self._lock:
            current = self.running.get(spec.mcp_server_id)
            if current is not None and not current.ended:
                if current.launch.fingerprint == fingerprint(spec):
                    current.last_used = time.monotonic()
                    return current
                self._stop_later(current)  # its settings changed since it started
            self.running.pop(spec.mcp_server_id, None)
            self._make_room()
            process = self._launch(spec, env)
            self.running[spec.mcp_server_id] = process
            process.start()
            return process

    def _make_room(self) -> None:
        for server_id, process in list(self.running.items()):
            if process.ended:
                del self.running[server_id]
        if len(self.running) < self.settings.max_servers:
            return
        idle = [p for p in self.running.values() if p.idle]
        if not idle:
            raise StdioFailure(
                f"this sandbox already runs {self.settings.max_servers} stdio MCP servers, "
                "all busy (O_MCP_STDIO_MAX_SERVERS); try again later"
            )
        oldest = min(idle, key=lambda p: p.last_used)
        del self.running[oldest.server_id]
        self._stop_later(oldest)

    def _stop_later(self, process: StdioProcess) -> None:
        task = asyncio.create_task(process.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def _launch(self, spec: StdioServerSpec, env: dict[str, str]) -> StdioProcess:
        settings = self.settings
        try:
            command = mcp_paths.resolve_command(spec.command, env)
        except mcp_paths.CommandNotFound as exc:
            raise StdioFailure(str(exc)) from exc
        uid = self.pool.lease_uid()
        scratch = Path(tempfile.mkdtemp(prefix="mcp-", dir=self.pool.base))
        if uid is not None:
            shutil.chown(scratch, uid, uid)
        private = [*settings.private_paths, str(self.pool.base)]
        config = {
            "command": command,
            "args": spec.args,
            "env": server_env(str(scratch), env),
            "scratch": str(scratch),
            "uid": uid,
            "read_paths": mcp_paths.read_paths(
                command,
                spec.args,
                env,
                base=self.pool.read_paths,
                extra=settings.read_paths,
                private=private,
            ),
            "limits": settings.rlimits(),
            "network": settings.network,
        }

        def cleanup() -> None:
            shutil.rmtree(scratch, ignore_errors=True)
            self.pool.release_uid(uid)

        launch = Launch(
            server_id=spec.mcp_server_id,
            fingerprint=fingerprint(spec),
            python=self.pool.python,
            config=config,
            start_seconds=settings.start_seconds,
            out_of_reach=mcp_paths.out_of_reach(
                command, spec.args, base=self.pool.read_paths, private=private, uid=uid
            ),
        )
        return StdioProcess(launch, cleanup)

    async def _stop_idle_ones(self) -> None:
        period = min(self.settings.idle_seconds / 4, 30.0)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            async with self._lock:
                for server_id, process in list(self.running.items()):
                    unused = now - process.last_used
                    if process.ended or (process.idle and unused >= self.settings.idle_seconds):
                        del self.running[server_id]
                        if not process.ended:
                            log.info("stopping idle stdio MCP server %s", server_id)
                            self._stop_later(process)

    def report(self) -> dict[str, Any]:
        """For /v1/health/: what this replica runs and how stdio servers are held."""
        s = self.settings
        return {
            "running": len([p for p in self.running.values() if not p.ended]),
            "max_servers": s.max_servers,
            "idle_seconds": s.idle_seconds,
            "network": "allowed (O_MCP_STDIO_NETWORK)" if s.network else "none",
            "limits": {
                "cpu_seconds_per_server": s.cpu_seconds,
                "memory_bytes": s.memory_bytes,
                "open_files": s.open_files,
                "call_seconds": s.call_seconds,
            },
        }
