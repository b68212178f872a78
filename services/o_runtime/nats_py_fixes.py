"""A workaround for a nats-py defect that O's TLS connections meet (nats-py 2.16).

A TLS handshake that fails at connection (a server certificate the client's CA did not sign,
say) leaves nats-py waiting for ever, in `TcpTransport.wait_closed`, for the plain stream it
upgraded to close: its transport was handed to TLS, so that stream's close never comes
(nats-io/nats.py#718, open). `nats.connect` then neither tries again nor raises: a service
would hang at its start for good, and `python -m o_ops` would never say what was wrong. The
wait is bounded here; past it the connection is closed anyway and nats-py goes on (tries
again, or raises NoServersError with the handshake's error given to `error_cb`).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

# A stream that closes does so within a round trip; one that has not by now never will.
WAIT_CLOSED = 2.0


def install() -> None:
    """Bound nats-py's wait for a closed stream (idempotent)."""
    from nats.aio import transport

    tcp: Any = transport.TcpTransport
    if getattr(tcp.wait_closed, "bounded", False):
        return
    unbounded = tcp.wait_closed

    async def wait_closed(self: Any) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(unbounded(self), WAIT_CLOSED)

    wait_closed.bounded = True  # type: ignore[attr-defined]
    tcp.wait_closed = wait_closed
