"""The tool-sandbox process: runs users' tools in confined single-use processes.

It has no database by design (in Kubernetes its NetworkPolicy lets it reach NATS only),
and no JetStream either: its NATS identity may only answer the requests it is sent
(`o.rpc.sandbox.run`, `.executions`, `.capabilities`; docs/security.md). Everything a
run needs arrives in the `RunTool` request, and the outcome goes back as the answer; the
executor records it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import msgpack
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from o_contracts import subjects
from o_contracts.pip_requirements import PipRequirement
from o_contracts.requests import ExecutionState, PreparePackages
from o_runtime.env import Env
from o_runtime.instruments import samples
from o_runtime.service import Service
from o_runtime.tracing import continued
from o_runtime.watched_answers import WatchedAnswers
from o_tool_sandbox.executions import Executions, replica_name
from o_tool_sandbox.limits import SandboxSettings
from o_tool_sandbox.mcp_requests import McpStdioRequests
from o_tool_sandbox.mcp_servers import StdioServers
from o_tool_sandbox.mcp_settings import McpStdioSettings
from o_tool_sandbox.packages import Packages, PackagesUnavailable, default_root
from o_tool_sandbox.pool import WorkerPool

log = logging.getLogger(__name__)
QUEUE = "tool_sandbox"
# Requests to stdio MCP servers one replica answers at once (each mostly waits on a server).
MCP_STDIO_WORKERS = 64


class ToolSandboxService(Service):
    name = "tool_sandbox"
    needs_database = False
    uses_jetstream = False

    def configure(self, env: Env) -> None:
        self.config = SandboxSettings.from_env(env)
        self.limits = self.config.limits
        self.mcp_config = McpStdioSettings.from_env(env, self.limits)
        self.replica = replica_name()

    def incarnation(self) -> str:
        # Callers learn the replica running their tool from its first answer, and ask on
        # this name whether it is still there (o_runtime/sandbox_requests.py).
        return self.replica

    async def setup(self) -> None:
        wanted = self.config.packages
        packages_root = Path(wanted.root) if wanted.root else default_root()
        self.pool = WorkerPool(
            self.limits,
            self.config.uid_base,
            self.config.python,
            network=self.config.network,
            extra_read_paths=(str(packages_root),) if wanted.enabled else (),
        )
        self.packages = Packages(
            packages_root,
            self.pool.python,
            wanted.enabled,
            wanted.install_timeout,
            max_bytes=wanted.max_bytes,
            # Longer than any call may run: a set in use is never removed.
            idle_seconds=self.limits.timeout + 60,
        )
        await self.pool.start()
        self.packages.refuse_unless_read_only(self.pool.isolation)
        samples.sandbox = self.pool.use
        self.executions = Executions(self.pool, self.replica, self.packages)
        self._held = 0
        self._taking: Subscription | None = None
        self._answering: set[asyncio.Task[None]] = set()
        nc = self.eventlog.nc
        await self._take_calls()
        # The server has the subscription before this replica counts as up: calls sent the
        # moment it is may come to it (a flaky test saw a just-started replica take none).
        await nc.flush()
        self._status = await nc.subscribe(subjects.SANDBOX_EXECUTIONS, cb=self._on_status)
        # Every replica installs what it is told will be needed (its host's folder may be
        # another replica's too: the install is atomic either way).
        self._preparing: set[asyncio.Task[None]] = set()
        self._prepare = await nc.subscribe(subjects.SANDBOX_PREPARE, cb=self._on_prepare)
        self.broker.subscriber(
            subjects.SANDBOX_CAPABILITIES, queue=QUEUE, title="sandbox isolation"
        )(self.capabilities)
        # stdio MCP servers: long-lived confined children of this replica (docs/mcp.md).
        self.mcp_servers = StdioServers(self.mcp_config, self.pool)
        self.mcp_servers.start()
        # Watched by their askers (o_runtime/watched_answers.py): a call to a server of a
        # replica that dies fails at once, with the reason, not after its timeout.
        self.mcp_requests = WatchedAnswers(
            nc,
            subjects.SANDBOX_MCP_STDIO,
            QUEUE,
            self.replica,
            McpStdioRequests(self.mcp_servers, self.replica).handle,
            MCP_STDIO_WORKERS,
        )
        await self.mcp_requests.start()

    async def _take_calls(self) -> None:
        if self._taking is None:
            self._taking = await self.eventlog.nc.subscribe(
                subjects.SANDBOX_RUN, queue=QUEUE, cb=self._on_run
            )

    async def _on_run(self, msg: Msg) -> None:
        # The first answer says who took the call: the caller then asks this replica's
        # liveness subject while it waits, and knows within a moment if it dies
        # (o_runtime/sandbox_requests.py). The outcome is the second answer.
        if msg.reply:
            with contextlib.suppress(Exception):
                await msg.respond(ExecutionState(state="running", replica=self.replica).encode())
        # A replica running as many calls as it may (O_SANDBOX_CONCURRENCY) leaves the
        # queue group until one ends, so NATS hands new calls to the others (and an
        # executor that finds no one free waits: o_executor/sandbox_calls.py).
        self._held += 1
        if self._held >= self.config.concurrency and self._taking is not None:
            # Drained, not unsubscribed: calls NATS already handed to this replica (queued
            # in the client behind this one) are still run. Unsubscribing would drop them
            # unanswered, and their callers would count them lost after LOST_AFTER. A drain
            # waits for this callback to return, so it runs in a task of its own.
            taking, self._taking = self._taking, None
            self._keep(asyncio.create_task(_drain(taking)))
        self._keep(asyncio.create_task(self._answer(msg)))

    def _keep(self, task: asyncio.Task[None]) -> None:
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _answer(self, msg: Msg) -> None:
        try:
            with continued("tool_sandbox RunTool", msg.headers):
                answer = await self.executions.run(msg.data)
            if msg.reply:
                await msg.respond(answer)
        except Exception:
            log.exception("tool run request failed")
        finally:
            self._held -= 1
            if self._held < self.config.concurrency:
                await self._take_calls()

    async def _on_prepare(self, msg: Msg) -> None:
        try:
            wanted = PreparePackages.decode(msg.data).requirements
        except Exception:
            log.warning("an unreadable request to prepare packages was ignored")
            return
        if wanted and not self.packages.unavailable:
            task = asyncio.create_task(self._install_ahead(wanted))
            self._preparing.add(task)
            task.add_done_callback(self._preparing.discard)

    async def _install_ahead(self, wanted: list[PipRequirement]) -> None:
        try:
            await self.packages.path_for(wanted)
        except PackagesUnavailable as exc:
            # (The first call that names the set tries again, and tells the model why.)
            log.warning("could not install tools' packages ahead: %s", exc)

    async def _on_status(self, msg: Msg) -> None:
        answer = self.executions.status(msg.data)
        if answer is not None and msg.reply:
            await msg.respond(answer)

    async def capabilities(self, body: bytes) -> bytes:
        """What this replica enforces on every tool run, for /v1/health/."""
        packed: bytes = msgpack.packb(self.report(), use_bin_type=True)
        return packed

    def report(self) -> dict[str, object]:
        iso = self.pool.isolation
        namespaces = list(iso.get("namespaces", []))
        network = (
            self.config.network.describe()
            if iso.get("network")
            else "network namespace + seccomp (no sockets)"
            if "network" in namespaces and iso.get("seccomp")
            else "network namespace"
            if "network" in namespaces
            else "seccomp (no sockets)"
            if iso.get("seccomp")
            else "none: tools are refused"
        )
        lim = self.limits
        return {
            "replica": self.replica,
            "network": network,
            "pid_namespace": "pid" in namespaces,
            "user": f"separate uid per run (from {iso['uid']})" if iso.get("uid") else "same uid",
            "filesystem": f"landlock {iso.get('landlock')}",
            "limits": {
                "wall_clock_seconds": lim.timeout,
                "cpu_seconds": lim.cpu_seconds,
                "memory_bytes": lim.memory_bytes,
                "file_bytes": lim.file_bytes,
                "processes": lim.processes,
                "output_bytes_kept": lim.output_keep,
            },
            "python": self.pool.python,
            "packages": self.packages.describe(),
            "mcp_stdio": self.mcp_servers.report(),
        }

    async def stopping(self) -> None:
        for task in list(self._preparing):
            task.cancel()
        for sub in (self._taking, self._status, self._prepare):
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        for task in list(self._answering):
            task.cancel()
        await self.mcp_requests.stop()
        await self.mcp_servers.close()
        await self.pool.close()


async def _drain(sub: Subscription) -> None:
    """Stop taking calls on `sub` once those NATS already sent it are taken."""
    with contextlib.suppress(Exception):
        await sub.drain()  # type: ignore[no-untyped-call]  # (nats-py: untyped)
