"""The tool-sandbox process: runs users' tools in confined single-use processes.

It has no database by design (in Kubernetes its NetworkPolicy lets it reach
NATS only): everything a run needs arrives in the `RunTool` command, and the
outcome goes back as an event and a reply.
"""

from __future__ import annotations

import msgpack

from o_contracts import subjects
from o_contracts.commands import RunTool
from o_runtime.commands import CommandConsumer
from o_runtime.env import Env
from o_runtime.service import Service
from o_tool_sandbox.executions import Executions, replica_name
from o_tool_sandbox.limits import SandboxSettings
from o_tool_sandbox.mcp_requests import McpStdioRequests
from o_tool_sandbox.mcp_servers import StdioServers
from o_tool_sandbox.mcp_settings import McpStdioSettings
from o_tool_sandbox.pool import WorkerPool

# A command whose replica died is delivered again (after SandboxSettings.ack_wait),
# at most MAX_DELIVER times in all.
MAX_DELIVER = 3
MAX_IN_FLIGHT = 1024
# Requests to stdio MCP servers one replica answers at once (each mostly waits on a server).
MCP_STDIO_WORKERS = 64


class ToolSandboxService(Service):
    name = "tool_sandbox"
    needs_database = False

    def configure(self, env: Env) -> None:
        self.config = SandboxSettings.from_env(env)
        self.limits = self.config.limits
        self.mcp_config = McpStdioSettings.from_env(env, self.limits)

    async def setup(self) -> None:
        self.pool = WorkerPool(self.limits, self.config.uid_base, self.config.python)
        await self.pool.start()
        self.replica = replica_name()
        executions = Executions(self.eventlog, self.pool, self.replica)
        self.consume(
            CommandConsumer(
                self.eventlog,
                "tool_sandbox",
                subjects.SANDBOX_COMMANDS,
                {RunTool: executions.run_tool},
                ack_wait=self.config.ack_wait,
                # Calls one replica runs at once; the durable consumer lets many
                # replicas' calls be in flight together.
                concurrency=self.config.concurrency,
                max_ack_pending=MAX_IN_FLIGHT,
                max_deliver=MAX_DELIVER,
            )
        )
        self.broker.subscriber(
            subjects.SANDBOX_CAPABILITIES, queue="tool_sandbox", title="sandbox isolation"
        )(self.capabilities)
        # stdio MCP servers: long-lived confined children of this replica (docs/mcp.md).
        self.mcp_servers = StdioServers(self.mcp_config, self.pool)
        self.mcp_servers.start()
        self.broker.subscriber(
            subjects.SANDBOX_MCP_STDIO,
            queue="tool_sandbox",
            title="stdio MCP servers",
            max_workers=MCP_STDIO_WORKERS,
        )(McpStdioRequests(self.mcp_servers, self.replica).handle)

    async def capabilities(self, body: bytes) -> bytes:
        """What this replica enforces on every tool run, for /v1/health/."""
        packed: bytes = msgpack.packb(self.report(), use_bin_type=True)
        return packed

    def report(self) -> dict[str, object]:
        iso = self.pool.isolation
        namespaces = list(iso.get("namespaces", []))
        network = (
            "network namespace + seccomp (no sockets)"
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
            "mcp_stdio": self.mcp_servers.report(),
        }

    async def stopping(self) -> None:
        await self.mcp_servers.close()
        await self.pool.close()
