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


class NatsUnreachable(nats.errors.Error):
    """No server took the connection; says why the last attempt failed (nats-py's own error
    says only "no servers available", whether the cause was TLS, a key or no server at all)."""


async def connect_once(url: str, name: str, identity: Identity) -> NATS:
    failures: list[Exception] = []

    async def noted(exc: Exception) -> None:
        # nats-py would print every failed attempt with a traceback; the last one's cause is
        # raised below, once.
        failures.append(exc)
        log.debug("NATS: %r", exc)

    try:
        nc: NATS = await nats.connect(
            url,
            name=name,
            connect_timeout=5,
            max_reconnect_attempts=3,
            reconnect_time_wait=0.5,
            error_cb=noted,
            **identity.options(),
        )
    except nats.errors.NoServersError as exc:
        why = _said(failures[-1]) if failures else "no server answered"
        raise NatsUnreachable(f"{url}: {why}") from exc
    return nc


def _said(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if type(exc).__name__ in text else f"{type(exc).__name__}: {text}"
