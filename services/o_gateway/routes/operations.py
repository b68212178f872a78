"""What operators and Kubernetes ask the gateway, beside Letta's `/v1/health/`:

- `GET /v1/health/live`: liveness (the process answers);
- `GET /v1/health/ready`: readiness (o_runtime/readiness.py), 503 with the failing
  checks when not ready;
- `GET /metrics`: Prometheus' text format (o_runtime/metrics.py).

They are answered without the API key (probes and scrapers carry none: keep `/metrics`
off a public ingress) and are left out of the OpenAPI document: they are not Letta's API.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from o_gateway.state import GW
from o_runtime import metrics
from o_runtime.metrics import PROMETHEUS_CONTENT_TYPE

router = APIRouter()

METRICS_PATH = "/metrics"


@router.get("/v1/health/live", include_in_schema=False)
async def live() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/health/ready", include_in_schema=False)
async def ready(gw: GW) -> JSONResponse:
    if gw.operated is None:
        body: dict[str, object] = {"status": "not ready", "checks": {"service": "not started"}}
        return JSONResponse(body, status_code=503)
    readiness = await gw.operated.readiness()
    return JSONResponse(readiness.body(), status_code=200 if readiness.ready else 503)


@router.get(METRICS_PATH, include_in_schema=False)
async def prometheus(gw: GW) -> Response:
    if gw.operated is not None:
        text = await gw.operated.metrics_text()
    else:
        text = metrics.prometheus_text() if metrics.serving() else None
    if text is None:
        return JSONResponse({"detail": "metrics are off (OTEL_METRICS_EXPORTER)"}, 404)
    return Response(text, media_type=PROMETHEUS_CONTENT_TYPE)
