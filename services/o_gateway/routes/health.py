from __future__ import annotations

from typing import Any

import msgpack
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from nats.errors import NoRespondersError, TimeoutError

from o_contracts import subjects
from o_gateway.render import VERSION
from o_gateway.routes.paths import route
from o_gateway.state import GW, Gateway

router = APIRouter()


@route(router, "GET", "/v1/health/")
async def health(gw: GW) -> dict[str, Any]:
    return {"version": VERSION, "status": "ok", "sandbox": await sandbox_isolation(gw)}


@route(router, "GET", "/v1/ready/")
async def check_readiness(gw: GW) -> Any:
    """Letta's readiness route: 200 while this gateway is ready for work (NATS connected,
    Postgres answering, its projections caught up: o_runtime/readiness.py), else 503
    with the reasons (what `/readyz` on its operations port says)."""
    if gw.operated is None:
        return {"version": VERSION, "status": "ok"}
    readiness = await gw.operated.readiness()
    if readiness.ready:
        return {"version": VERSION, "status": "ok"}
    return JSONResponse(
        status_code=503,
        content={"version": VERSION, "status": "not ready", "checks": readiness.checks},
    )


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
