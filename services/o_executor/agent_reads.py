"""The agent as a run reads it: its configuration, tools, canary and sandbox settings, from
the gateway's, the evolution service's and the sandbox configurations' projections (the
executor only reads them); with its core memory for a run's first prompt, in the same
round trip."""

from __future__ import annotations

import asyncpg

from o_executor.run.agent import AgentConfig
from o_memory.core_memory import CORE_MEMORY_JSON, CoreMemory, core_memory
from o_runtime.sandbox_settings import LOCAL_ENV_SQL, LOCAL_REQUIREMENTS_SQL

# Users' tools come by name, with their source: it travels to the sandbox in each RunTool
# command.
_AGENT_COLUMNS = (
    "a.id, a.name, a.system, a.agent_type, a.llm_config, a.tools, a.tool_rules,"
    " a.tool_ids, a.encrypted_secrets, a.concurrency, a.enable_sleeptime,"
    " coalesce((SELECT jsonb_agg(jsonb_build_object("
    "'id', t.id, 'name', t.name, 'source_code', t.source_code,"
    " 'json_schema', t.json_schema, 'return_char_limit', t.return_char_limit,"
    " 'idempotent', t.idempotent, 'pip_requirements', t.pip_requirements))"
    " FROM tools t WHERE t.id = ANY(a.tool_ids)), '[]')"
    # MCP servers' tools, with where to call them (secrets as ciphertext).
    " || coalesce((SELECT jsonb_agg(jsonb_build_object('id', m.id, 'name', m.name,"
    " 'source_code', '', 'json_schema', m.json_schema, 'return_char_limit', 50000,"
    " 'idempotent', false, 'mcp', jsonb_build_object('server_type', s.server_type,"
    " 'url', s.server_url, 'auth_header', s.auth_header,"
    " 'encrypted_auth_token', s.encrypted_auth_token,"
    " 'encrypted_custom_headers', s.encrypted_custom_headers, 'server_id', s.id,"
    " 'command', s.command, 'args', s.args, 'encrypted_env', s.encrypted_env)))"
    " FROM mcp_tools m JOIN mcp_servers s ON s.id = m.mcp_server_id"
    " WHERE m.id = ANY(a.tool_ids)), '[]')"
    " AS user_tools,"
    # The running canary (o_evolution's projection), whose arm a run takes.
    " (SELECT jsonb_build_object('rollout_id', r.rollout_id, 'weight', r.weight,"
    " 'version_id', r.version_id, 'stable_version', r.stable_version, 'spec', r.spec,"
    " 'patch', (SELECT p.patch FROM evolution_proposals p WHERE p.id = r.proposal_id))"
    # (Also once it passed at full traffic, until its promotion is served.)
    " FROM evolution_rollouts r WHERE r.agent_id = a.id"
    " AND r.status IN ('running', 'completed'))"
    " AS rollout,"
    # Whose evolution its evolution tools act on (o_executor/run/evolution_tools.py).
    " (SELECT config FROM evolution_config WHERE agent_id = a.id) AS own_evolution,"
    " (SELECT jsonb_build_object('agent_id', g.manager_agent_id, 'config', c.config)"
    " FROM groups g JOIN evolution_config c ON c.agent_id = g.manager_agent_id"
    " WHERE g.manager_type = 'sleeptime' AND a.id = ANY(g.agent_ids) LIMIT 1)"
    " AS primary_evolution,"
    # The local sandbox configuration's variables and packages (every tool's).
    f" {LOCAL_ENV_SQL} AS sandbox_env, {LOCAL_REQUIREMENTS_SQL} AS sandbox_requirements"
)
_AGENT = f"SELECT {_AGENT_COLUMNS} FROM agents a WHERE a.id = $1"
# The same with the agent's core memory for a run's first prompt: one round trip where
# there were two on every run's path (each a TLS record to decrypt both ways).
_AGENT_AND_CORE = (
    f"SELECT {_AGENT_COLUMNS}, {CORE_MEMORY_JSON} AS core FROM agents a WHERE a.id = $1"
)


async def read_agent(pool: asyncpg.Pool, agent_id: str) -> AgentConfig | None:
    row = await pool.fetchrow(_AGENT, agent_id)
    return AgentConfig.from_row(row) if row is not None else None


async def read_agent_and_core(
    pool: asyncpg.Pool, agent_id: str
) -> tuple[AgentConfig | None, CoreMemory | None]:
    """The agent and its core memory (its own blocks: a conversation's isolated blocks are
    read apart, o_memory/core_memory.py's with_isolated); (None, None) if there is no such
    agent."""
    row = await pool.fetchrow(_AGENT_AND_CORE, agent_id)
    if row is None:
        return None, None
    return AgentConfig.from_row(row), core_memory(row["core"])
