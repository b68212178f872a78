"""Postgres access: the connection pool and the migrations that run at start."""

from __future__ import annotations

import json
import logging
from importlib import resources
from typing import Any

import asyncpg
from pgvector.asyncpg import register_vector

log = logging.getLogger(__name__)

# One advisory lock for schema changes: five services start at once and each
# runs the migrations; the lock makes them take turns, the table makes it idempotent.
_MIGRATION_LOCK = 0x0_5C4E_3A


async def _init_connection(conn: asyncpg.Connection) -> None:
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    await register_vector(conn)


async def _no_reset(conn: asyncpg.Connection) -> None:
    """Pooled connections are returned as they are, without asyncpg's reset query.

    That query (RESET ALL, UNLISTEN *, advisory unlock) costs a round trip on
    every release. O code sets session state only with SET LOCAL, listens on
    its own connections, and releases the advisory locks it takes.
    """


async def connect_pool(dsn: str, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    await migrate(dsn)
    pool: asyncpg.Pool = await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=_init_connection, reset=_no_reset
    )
    return pool


def migration_files() -> list[tuple[str, str]]:
    folder = resources.files("o_runtime") / "migrations"
    files = sorted((f.name, f.read_text()) for f in folder.iterdir() if f.name.endswith(".sql"))
    return files


async def migrate(dsn: str) -> list[str]:
    """Apply the migrations not applied yet, in name order. Returns their names."""
    conn: asyncpg.Connection = await asyncpg.connect(dsn)
    applied: list[str] = []
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["name"] for r in await conn.fetch("SELECT name FROM schema_migrations")}
            for name, sql in migration_files():
                if name in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute("INSERT INTO schema_migrations(name) VALUES ($1)", name)
                log.info("applied migration %s", name)
                applied.append(name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK)
    finally:
        await conn.close()
    return applied


def record_to_dict(record: Any) -> dict[str, Any]:
    return dict(record.items())
