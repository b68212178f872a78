from __future__ import annotations

from typing import Any

import msgpack
from fastapi import APIRouter
from nats.errors import NoRespondersError, TimeoutError

from o_contracts import subjects
from o_gateway.render import VERSION
from o_gateway.routes.paths import route
from o_gateway.state import GW, Gateway

router = APIRouter()


@route(router, "GET", "/v1/health/")
async def health(gw: GW) -> dict[str, Any]:
    return {"version": VERSION, "status": "ok", "sandbox": await sandbox_isolation(gw)}


async def sandbox_isolation(gw: Gateway) -> dict[str, Any]:
    """What a tool-sandbox replica enforces (network cut-off, uid, limits), asked over NATS.

    The sandbox has no database, so it cannot write this down for us: one
    replica answers the request (they are configured alike).
    """
    try:
        msg = await gw.eventlog.nc.request(subjects.SANDBOX_CAPABILITIES, b"", timeout=1.0)
    except (TimeoutError, NoRespondersError):
        return {"available": False}
    report: dict[str, Any] = msgpack.unpackb(msg.data, raw=False)
    return {"available": True, **report}
