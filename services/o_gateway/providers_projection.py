"""The gateway's read model of model providers registered through the API (projection
"providers"; events/providers.py)."""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import (
    ProviderCreated,
    ProviderDeleted,
    ProviderModelsSynced,
    ProviderUpdated,
)
from o_contracts.projection_names import PROVIDERS
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection, assignments

providers = Projection(
    name=PROVIDERS, filter_subject=subjects.PROVIDER_EVENTS, tables=["providers"]
)

# ProviderUpdated.changes keys that are columns.
COLUMNS = ("base_url", "encrypted_api_key", "region", "api_version")


@providers.on(ProviderCreated)
async def provider_created(conn: asyncpg.Connection, e: ProviderCreated, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO providers (id, name, provider_type, base_url, encrypted_api_key, region,"
        " api_version, created_at, updated_at, last_seq)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$8,$9) ON CONFLICT (id) DO NOTHING",
        e.provider_id,
        e.name,
        e.provider_type,
        e.base_url,
        e.encrypted_api_key,
        e.region,
        e.api_version,
        rec.envelope.time,
        rec.seq,
    )


@providers.on(ProviderUpdated)
async def provider_updated(conn: asyncpg.Connection, e: ProviderUpdated, rec: Recorded) -> None:
    args: list[object] = [e.provider_id, rec.envelope.time, rec.seq]
    sets = assignments(e.changes, COLUMNS, args)
    await conn.execute(
        f"UPDATE providers SET updated_at = $2, last_seq = $3{sets} WHERE id = $1",
        *args,
    )


@providers.on(ProviderModelsSynced)
async def provider_models_synced(
    conn: asyncpg.Connection, e: ProviderModelsSynced, rec: Recorded
) -> None:
    await conn.execute(
        "UPDATE providers SET models = $2, embedding_models = $3, last_synced = $4,"
        " last_seq = $5 WHERE id = $1",
        e.provider_id,
        e.models,
        e.embedding_models,
        rec.envelope.time,
        rec.seq,
    )


@providers.on(ProviderDeleted)
async def provider_deleted(conn: asyncpg.Connection, e: ProviderDeleted, rec: Recorded) -> None:
    await conn.execute("DELETE FROM providers WHERE id = $1", e.provider_id)
