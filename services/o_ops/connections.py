"""The operator's connections: NATS as the operator identity, Postgres as the services do."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg

from o_ops.settings import OpsSettings
from o_runtime.db import connect_pool
from o_runtime.eventlog import EventLog


@contextlib.asynccontextmanager
async def operator_log(settings: OpsSettings, *, jetstream: bool = True) -> AsyncIterator[EventLog]:
    """The log as the operator; `jetstream` False: at once, even where O's streams do not
    exist yet (a restore into an empty NATS)."""
    url, identity = settings.nats()
    eventlog = await EventLog.connect(url, name="o_ops", identity=identity, jetstream=jetstream)
    try:
        yield eventlog
    finally:
        await eventlog.close()


@contextlib.asynccontextmanager
async def database(settings: OpsSettings) -> AsyncIterator[asyncpg.Pool]:
    """A small pool on the services' database (the migrations run first, as the services
    run them: an empty database gets O's tables)."""
    pool = await connect_pool(settings.database(), min_size=1, max_size=2)
    try:
        yield pool
    finally:
        await pool.close()
