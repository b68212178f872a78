"""`GET /v1/operations/status`: an O extension, the console's health page.

What `python -m o_ops status --json` prints, from the same module (o_ops/system_status.py):
every service process that answers the roll call with its readiness, every durable
consumer's backlog and lag, each projection's lag, the dead letters kept. Unlike the
probes under `/v1/health/`, it needs the API key (it tells how the system is built and
what it is doing). It takes up to 2.5 s when a service does not answer (the roll call's
deadline). Not in the OpenAPI document: not Letta's API.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import APIRouter

from o_gateway.state import GW
from o_ops.system_status import expected_services, gather, max_lag

router = APIRouter()

STATUS_PATH = "/v1/operations/status"


@router.get(STATUS_PATH, include_in_schema=False)
async def system_status(gw: GW) -> dict[str, Any]:
    status = await gather(
        gw.eventlog.nc,
        gw.pool,
        expected=expected_services(None, os.environ),
        lag_limit=max_lag(os.environ),
    )
    return status.body()
