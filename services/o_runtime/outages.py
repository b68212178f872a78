"""Failures that mean Postgres or NATS cannot be reached right now: an outage, not a fault.

A command or an event that fails because a server is down is not to blame for
it: it is tried again once the server is back, never dead-lettered for it
(issue 10: a StartRun nacked five times during a 30-second Postgres outage
was dead-lettered, and its run lost). The gateway answers such failures with
503 and Retry-After.
"""

from __future__ import annotations

import asyncpg
import nats.errors
import nats.js.errors

# Builtin TimeoutError (an OSError) covers nats' TimeoutError and asyncpg's
# connect and pool-acquire timeouts.
UNAVAILABLE: tuple[type[Exception], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.InterfaceError,
    # "cannot switch to state N; another operation is in progress": a connection
    # cut mid-statement when Postgres crashed (seen under make run's chaos).
    asyncpg.InternalClientError,
    OSError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionDrainingError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.NoRespondersError,
    nats.errors.NoServersError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.NoStreamResponseError,
)


# JetStream's "maximum consumers limit reached": a server's resource running
# out, not a fault of the command that met it.
_SERVER_LIMITS = frozenset({10026})


def is_outage(exc: BaseException) -> bool:
    if isinstance(exc, nats.js.errors.APIError) and exc.err_code in _SERVER_LIMITS:
        return True
    if isinstance(exc, asyncpg.InterfaceError):
        # "connection is closed", "pool is closing": an outage; "another operation is
        # in progress" and the like are bugs.
        return "clos" in str(exc)
    return isinstance(exc, UNAVAILABLE)
