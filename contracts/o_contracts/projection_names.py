"""The read models by name: what a write waits for before it answers (read your writes),
what a decision checks it reads (o_runtime/reads.py), what `make rebuild` rebuilds."""

from __future__ import annotations

from typing import Final

AGENTS: Final = "agents"  # the gateway's agent registry
TOOLS: Final = "tools"  # the gateway's tool registry
MEMORY: Final = "memory"  # the memory service's blocks and who has them
ARCHIVAL: Final = "archival"  # the memory service's archival passages
RUNS: Final = "runs"  # the executor's runs, steps and messages
MCP_SERVERS: Final = "mcp_servers"  # the gateway's MCP servers and the tools they offer
GROUPS: Final = "groups"  # the gateway's multi-agent groups
PROVIDERS: Final = "providers"  # the gateway's model providers registered through the API
IDENTITIES: Final = "identities"  # the gateway's identities and the agents and blocks they have
# The gateway's sandbox configurations and their (encrypted) environment variables.
SANDBOX_CONFIGS: Final = "sandbox_configs"
EVOLUTION: Final = "evolution"  # the evolution service's versions, proposals and history
CALLBACKS: Final = "callbacks"  # the gateway's completion callbacks, one per run that asked
SCHEDULES: Final = "schedules"  # scheduled runs: each schedule, its next slot and its fires
# The memory service's folders, their files and chunks, and which agent sees which file.
FOLDERS: Final = "folders"

ALL: Final = (
    AGENTS,
    TOOLS,
    MEMORY,
    ARCHIVAL,
    RUNS,
    MCP_SERVERS,
    GROUPS,
    PROVIDERS,
    IDENTITIES,
    SANDBOX_CONFIGS,
    EVOLUTION,
    CALLBACKS,
    SCHEDULES,
    FOLDERS,
)
