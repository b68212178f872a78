"""The operator's connections: NATS as the operator identity, Postgres as the services do."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg

from o_ops.settings import OpsSettings
from o_runtime.db import connect_pool
from o_runtime.eventlog import EventLog
from o_runtime.one_shot_nats import connect_once


@contextlib.asynccontextmanager
async def operator_log(settings: OpsSettings) -> AsyncIterator[EventLog]:
    """The log as the operator, at once: a tool does not wait for O's streams to appear (as a
    service does); where they are missing, its first read says so (a restore needs none)."""
    url, identity = settings.nats()

    # (Not EventLog.connect: a service retries for ever; a command run by hand reports.)
    nc = await connect_once(url, "o_ops", identity)
    eventlog = EventLog(nc)
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
