"""Whether a run's agent has its evolution tools (issue 20; base_tools.EVOLUTION_TOOLS), and
whose evolution they act on. Pure.

A sleep-time companion has them, acting on its primary, whenever the primary's
evolution is on: reflecting on how the primary does is its job. An agent acts on its
own evolution only when the operator gave it the tools (`tools_for_agent`, or the tools
attached by name). With evolution off (for the agent, or server-wide) they are absent
from the tool list; a call from an older list is answered with a tool error that says so.
"""

from __future__ import annotations

import dataclasses

from o_contracts.base_tools import EVOLUTION_TOOLS
from o_executor.run.agent import AgentConfig


def granted(agent: AgentConfig, server_enabled: bool) -> AgentConfig:
    target: str | None = None
    if server_enabled:
        if agent.evolution_primary is not None:
            target = agent.evolution_primary
        elif agent.evolution_own:
            target = agent.id
    tools = tuple(t for t in agent.tools if t not in EVOLUTION_TOOLS)
    if target is not None:
        tools += EVOLUTION_TOOLS
    return dataclasses.replace(agent, tools=tools, evolution_target=target)
