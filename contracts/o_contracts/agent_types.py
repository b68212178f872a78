"""Agent types, as Letta names them, and what each one's loop does differently."""

from __future__ import annotations

from typing import Literal, get_args

# sleeptime_agent: a sleep-time companion (docs/sleeptime.md); it runs the letta_v1 loop.
AgentType = Literal["letta_v1_agent", "memgpt_v2_agent", "memgpt_agent", "sleeptime_agent"]
AGENT_TYPES: tuple[str, ...] = get_args(AgentType)
DEFAULT_AGENT_TYPE: AgentType = "letta_v1_agent"

# Letta's memgpt loops: the agent speaks through `send_message`, and its other
# tools take `request_heartbeat` to ask for another step.
_HEARTBEAT_AGENTS = frozenset({"memgpt_agent", "memgpt_v2_agent"})


def uses_heartbeats(agent_type: str) -> bool:
    """Whether the agent's tools take `request_heartbeat` (and it talks via send_message)."""
    return agent_type in _HEARTBEAT_AGENTS


def speaks_plainly(agent_type: str) -> bool:
    """Whether the agent's text is its answer (letta_v1_agent), not a send_message call."""
    return not uses_heartbeats(agent_type)
