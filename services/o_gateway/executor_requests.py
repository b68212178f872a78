"""A request to the executor over NATS (o.rpc.executor.*), answered or turned into the HTTP
error it stands for: 503 when no executor runs, 504 when it did not answer in time.

The executor holds O's provider clients and agents' prompts, so the gateway asks it for what
needs them (a completion outside a run, an agent's context window) instead of doing it itself.
"""

from __future__ import annotations

from typing import Protocol

from fastapi import HTTPException
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from o_gateway.state import Gateway
from o_runtime.watched_requests import request_watched


class Request(Protocol):
    """A request of o_contracts/requests.py: it encodes itself as MessagePack."""

    def encode(self) -> bytes: ...


async def ask_executor(
    gw: Gateway,
    subject: str,
    request: Request,
    *,
    timeout: float,
    doing: str,
    too_slow: str,
    watched: bool = False,
) -> bytes:
    """The executor's reply to `request` on `subject`; `doing` and `too_slow` finish the 503's
    and the 504's reasons ("no executor is running to <doing>"). `watched`: the executor that
    takes it says so, and another is asked if it dies (o_runtime/watched_requests.py)."""
    nc = gw.eventlog.nc
    try:
        if watched:
            reply = await request_watched(
                nc, subject, request.encode(), role="executor", timeout=timeout
            )
        else:
            reply = await nc.request(subject, request.encode(), timeout=timeout)
    except NoRespondersError as exc:
        raise HTTPException(503, f"no executor is running to {doing}") from exc
    except NatsTimeout as exc:
        raise HTTPException(504, too_slow) from exc
    return reply.data
