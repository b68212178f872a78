"""Settings of the stdio MCP servers a sandbox replica runs (read once at start).

The confinement is the tools' (limits.py); what differs is what a long-lived
server needs: CPU counted over its whole life rather than one call, more open files
(an event loop, pipes, a node runtime), and the bounds on how many run and how long
they stay.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from o_runtime.env import Env
from o_tool_sandbox.limits import MB, Limits


@dataclass(frozen=True)
class McpStdioSettings:
    max_servers: int  # running at once in one replica
    idle_seconds: float  # an unused server is stopped after this long
    start_seconds: float  # to start and answer `initialize`
    call_seconds: float  # longest one call may take (a caller may ask less)
    cpu_seconds: int  # over a server's life; past it the kernel stops it
    memory_bytes: int
    file_bytes: int
    processes: int
    open_files: int
    network: bool  # the operator lets stdio servers reach the network
    read_paths: tuple[str, ...]  # the operator's additions to what servers may read
    private_paths: tuple[str, ...]  # O's folders no server may read

    @classmethod
    def from_env(cls, env: Env, tools: Limits) -> McpStdioSettings:
        extra = env.text("O_MCP_STDIO_READ_PATHS", "")
        data = env.text("O_DATA_DIR", "data")
        return cls(
            max_servers=env.integer("O_MCP_STDIO_MAX_SERVERS", 8, minimum=1),
            idle_seconds=env.number("O_MCP_STDIO_IDLE_SECONDS", 300.0, minimum=1.0),
            start_seconds=env.number("O_MCP_STDIO_START_SECONDS", 30.0, minimum=1.0),
            call_seconds=env.number("O_MCP_STDIO_CALL_SECONDS", 60.0, minimum=0.1),
            cpu_seconds=env.integer("O_MCP_STDIO_CPU_SECONDS", 600, minimum=1),
            memory_bytes=env.integer(
                "O_MCP_STDIO_MEMORY_MB", max(tools.memory_bytes // MB, 1024), minimum=64
            )
            * MB,
            file_bytes=tools.file_bytes,
            processes=tools.processes,
            open_files=env.integer("O_MCP_STDIO_OPEN_FILES", 256, minimum=16),
            network=env.flag("O_MCP_STDIO_NETWORK"),
            read_paths=tuple(p for p in extra.split(os.pathsep) if p),
            private_paths=tuple(
                str(p) for p in (Path(data).resolve(), env.optional("HOME")) if p and str(p) != "/"
            ),
        )

    def rlimits(self) -> dict[str, int]:
        return {
            "cpu_seconds": self.cpu_seconds,
            "memory_bytes": self.memory_bytes,
            "file_bytes": self.file_bytes,
            "processes": self.processes,
            "open_files": self.open_files,
        }
