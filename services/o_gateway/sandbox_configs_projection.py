"""The gateway's read model of sandbox configurations and their environment variables
(projection "sandbox_configs"; events/sandbox_configs.py). The executor reads the local
configuration's variables and packages from it for each run's tool calls."""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    SandboxConfigCreated,
    SandboxConfigDeleted,
    SandboxConfigUpdated,
    SandboxEnvVarDeleted,
    SandboxEnvVarSet,
)
from o_contracts.projection_names import SANDBOX_CONFIGS
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection

sandbox_configs = Projection(
    name=SANDBOX_CONFIGS,
    filter_subject=subjects.SANDBOX_CONFIG_EVENTS,
    tables=["sandbox_configs", "sandbox_env_vars"],
)


async def _touched(conn: asyncpg.Connection, config_id: str, rec: Recorded) -> None:
    # Its position only (changes to it are decided on it); its `updated_at` is its settings'
    # (Letta's does not move with its variables).
    await conn.execute("UPDATE sandbox_configs SET last_seq = $2 WHERE id = $1", config_id, rec.seq)


@sandbox_configs.on(SandboxConfigCreated)
async def config_created(conn: asyncpg.Connection, e: SandboxConfigCreated, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO sandbox_configs (id, sandbox_type, config, created_at, updated_at, last_seq)"
        " VALUES ($1, $2, $3, $4, $4, $5) ON CONFLICT (id) DO NOTHING",
        e.sandbox_config_id,
        e.sandbox_type,
        e.config,
        rec.envelope.time,
        rec.seq,
    )


@sandbox_configs.on(SandboxConfigUpdated)
async def config_updated(conn: asyncpg.Connection, e: SandboxConfigUpdated, rec: Recorded) -> None:
    await conn.execute(
        "UPDATE sandbox_configs SET config = $2, updated_at = $3, last_seq = $4 WHERE id = $1",
        e.sandbox_config_id,
        e.config,
        rec.envelope.time,
        rec.seq,
    )


@sandbox_configs.on(SandboxConfigDeleted)
async def config_deleted(conn: asyncpg.Connection, e: SandboxConfigDeleted, rec: Recorded) -> None:
    await conn.execute(
        "DELETE FROM sandbox_env_vars WHERE sandbox_config_id = $1", e.sandbox_config_id
    )
    await conn.execute("DELETE FROM sandbox_configs WHERE id = $1", e.sandbox_config_id)


@sandbox_configs.on(SandboxEnvVarSet)
async def env_var_set(conn: asyncpg.Connection, e: SandboxEnvVarSet, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO sandbox_env_vars (id, sandbox_config_id, key, encrypted_value, description,"
        " created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6)"
        " ON CONFLICT (id) DO UPDATE SET key = $3, encrypted_value = $4, description = $5,"
        " updated_at = $6",
        e.env_var_id,
        e.sandbox_config_id,
        e.key,
        e.encrypted_value,
        e.description,
        rec.envelope.time,
    )
    await _touched(conn, e.sandbox_config_id, rec)


@sandbox_configs.on(SandboxEnvVarDeleted)
async def env_var_deleted(conn: asyncpg.Connection, e: SandboxEnvVarDeleted, rec: Recorded) -> None:
    await conn.execute("DELETE FROM sandbox_env_vars WHERE id = $1", e.env_var_id)
    await _touched(conn, e.sandbox_config_id, rec)
