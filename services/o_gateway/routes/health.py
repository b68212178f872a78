from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from o_gateway.render import VERSION
from o_gateway.routes.paths import route

router = APIRouter()


@route(router, "GET", "/v1/health/")
async def health() -> dict[str, Any]:
    return {"version": VERSION, "status": "ok"}
