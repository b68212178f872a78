"""What the local sandbox configuration (Letta's sandbox-config, the gateway's projection
"sandbox_configs") adds to every user tool's run: its environment variables, as ciphertext
(beneath the agent's own secrets: the agent's win on a shared name), and its packages.

The executor reads both in the same statement as the agent it runs (service.load_agent); the
gateway, for tools it runs outside a turn, with `local_sandbox`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from o_contracts.pip_requirements import PipRequirement

# SQL expressions, one value each: the local configuration's variables {key: ciphertext} and
# its pip_requirements (both empty without one).
LOCAL_ENV_SQL = (
    "(SELECT coalesce(jsonb_object_agg(v.key, v.encrypted_value), '{}')"
    " FROM sandbox_env_vars v JOIN sandbox_configs c ON c.id = v.sandbox_config_id"
    " WHERE c.sandbox_type = 'local')"
)
LOCAL_REQUIREMENTS_SQL = (
    "(SELECT coalesce(c.config->'pip_requirements', '[]') FROM sandbox_configs c"
    " WHERE c.sandbox_type = 'local' LIMIT 1)"
)


@dataclass(frozen=True)
class LocalSandbox:
    encrypted_env: Mapping[str, str] = field(default_factory=dict)
    requirements: tuple[PipRequirement, ...] = ()

    @classmethod
    def of(cls, env: Any, requirements: Any) -> LocalSandbox:
        return cls(
            dict(env or {}),
            tuple(PipRequirement.model_validate(r) for r in requirements or ()),
        )

    def environment(self, agent_secrets: Mapping[str, str]) -> dict[str, str]:
        """The ciphertexts a tool run gets: these variables, the agent's over them."""
        return {**self.encrypted_env, **agent_secrets}

    def packages(self, tools: Sequence[PipRequirement]) -> list[PipRequirement]:
        """The tool's packages and the configuration's, each once."""
        return list(dict.fromkeys([*tools, *self.requirements]))


async def local_sandbox(pool: asyncpg.Pool) -> LocalSandbox:
    row = await pool.fetchrow(f"SELECT {LOCAL_ENV_SQL} AS env, {LOCAL_REQUIREMENTS_SQL} AS reqs")
    return LocalSandbox.of(row["env"], row["reqs"]) if row else LocalSandbox()
