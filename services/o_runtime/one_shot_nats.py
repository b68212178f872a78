"""A NATS connection for a job that runs once (the setup role's topology, the operator's
CLI), as opposed to a service's, which retries for ever (EventLog.connect).

A short reconnect rides out a server's blip; a server gone for good fails the job within
seconds instead of after nats-py's 60 tries two seconds apart (a stop during `make run`'s
start waits for the setup thread; a command run by hand should report, not hang).
"""

from __future__ import annotations

import logging

import nats
from nats.aio.client import Client as NATS

from o_runtime.nats_identity import Identity

log = logging.getLogger(__name__)


async def _quiet(exc: Exception) -> None:
    # nats-py prints every failed attempt with a traceback; the failure that matters is
    # raised, and said once, by whoever connected.
    log.debug("NATS: %r", exc)


async def connect_once(url: str, name: str, identity: Identity) -> NATS:
    nc: NATS = await nats.connect(
        url,
        name=name,
        connect_timeout=5,
        max_reconnect_attempts=3,
        reconnect_time_wait=0.5,
        error_cb=_quiet,
        **identity.options(),
    )
    return nc
