"""The agent as evolution sees it: its current version (from the gateway's agents and
the memory service's blocks projections) and what applying a version to it changes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from o_contracts.base_tools import SCHEMAS
from o_contracts.evolution import EvolutionConfig, VersionSpec
from o_evolution.patches import spec_from_agent
from o_memory.core_memory import read_core_memory


@dataclass(frozen=True)
class AgentNow:
    agent_id: str
    system: str
    tools: list[str]  # built-in tools by name
    user_tools: list[str]
    tool_rules: list[dict[str, Any]]
    llm_config: dict[str, Any]
    # Block id by label.
    block_ids: dict[str, str]
    block_values: dict[str, str]

    def spec(self, config: EvolutionConfig) -> VersionSpec:
        return spec_from_agent(
            self.system,
            self.block_values,
            [*self.tools, *self.user_tools],
            self.tool_rules,
            self.llm_config,
            config,
        )

    @property
    def known_tools(self) -> set[str]:
        """What a patch may add: built-in tools (users' tools are attached through the API)."""
        return set(SCHEMAS)


async def agent_now(pool: asyncpg.Pool, agent_id: str) -> AgentNow | None:
    row = await pool.fetchrow(
        "SELECT a.system, a.tools, a.tool_rules, a.llm_config,"
        " coalesce((SELECT array_agg(t.name ORDER BY t.name) FROM tools t"
        "  WHERE t.id = ANY(a.tool_ids)), '{}') AS user_tools"
        " FROM agents a WHERE a.id = $1",
        agent_id,
    )
    if row is None:
        return None
    core = await read_core_memory(pool, agent_id)
    return AgentNow(
        agent_id=agent_id,
        system=row["system"] or "",
        tools=list(row["tools"] or []),
        user_tools=list(row["user_tools"]),
        tool_rules=[dict(r) for r in row["tool_rules"] or []],
        llm_config=dict(row["llm_config"] or {}),
        block_ids={b["label"]: b["id"] for b in core["blocks"]},
        block_values={b["label"]: b["value"] for b in core["blocks"]},
    )


def agent_changes(now: AgentNow, spec: VersionSpec) -> dict[str, Any]:
    """The AgentUpdated changes that make the agent serve `spec` (its blocks aside)."""
    changes: dict[str, Any] = {}
    if spec.system != now.system:
        changes["system"] = spec.system
    builtin = [t for t in spec.tools if t not in now.user_tools]
    if sorted(builtin) != sorted(now.tools):
        changes["tools"] = builtin
    if spec.tool_rules != now.tool_rules:
        changes["tool_rules"] = list(spec.tool_rules)
    settings = {k: v for k, v in spec.model_settings.items() if now.llm_config.get(k) != v}
    if settings:
        changes["llm_config"] = now.llm_config | settings
    return changes
