"""Traces Letta's API reads: a step's exchange with its model provider (`GET
/v1/steps/{id}/trace`, and Letta's deprecated `GET /v1/telemetry/{id}`), kept by the
executor for a while (o_contracts/provider_traces.py); a run's OpenTelemetry spans
(`GET /v1/runs/{id}/trace`), which O exports to an OTLP collector and does not keep."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from nats.js.errors import BucketNotFoundError, KeyNotFoundError

from o_contracts import subjects
from o_contracts.provider_traces import ProviderTrace
from o_gateway.routes.paths import route
from o_gateway.state import GW, Gateway, checked_id

router = APIRouter()


async def provider_trace(gw: Gateway, step_id: str) -> dict[str, Any] | None:
    """The step's trace in Letta's shape; None (as Letta) when none is kept: an unknown
    step, one older than the traces are kept, or traces off."""
    checked_id(step_id, "step")
    try:
        bucket = await gw.eventlog.bucket(subjects.PROVIDER_TRACES_BUCKET)
        entry = await bucket.get(step_id)
    except (BucketNotFoundError, KeyNotFoundError):
        return None
    if entry.value is None:
        return None
    trace = ProviderTrace.decode(entry.value)
    # Letta's fields O has no value for (organizations, users, billing, agent tags).
    return trace.model_dump() | {
        "agent_tags": None,
        "org_id": None,
        "user_id": None,
        "compaction_settings": None,
        "billing_context": None,
    }


@route(router, "GET", "/v1/steps/{step_id}/trace")
async def retrieve_trace_for_step(step_id: str, gw: GW) -> dict[str, Any] | None:
    return await provider_trace(gw, step_id)


@route(router, "GET", "/v1/telemetry/{step_id}", deprecated=True)
async def retrieve_provider_trace(step_id: str, gw: GW) -> dict[str, Any] | None:
    """Letta's deprecated name for `GET /v1/steps/{step_id}/trace`."""
    return await provider_trace(gw, step_id)


@route(router, "GET", "/v1/runs/{run_id}/trace")
async def retrieve_trace_for_run(run_id: str, gw: GW) -> list[dict[str, Any]]:
    """As Letta's without a span store (ClickHouse there): 501. O's spans go to the
    operator's OTLP collector (docs/observability.md); each step's provider exchange is
    `GET /v1/steps/{step_id}/trace`."""
    checked_id(run_id, "run")
    raise HTTPException(
        501,
        "O keeps no OpenTelemetry spans: they are exported to the collector named by"
        " OTEL_EXPORTER_OTLP_ENDPOINT (docs/observability.md). A step's exchange with its"
        " model is GET /v1/steps/{step_id}/trace.",
    )
