"""`GET /v1/steps/`: every agent's steps, with Letta's filters."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from o_gateway.pagination import Listing
from o_gateway.routes.paths import route
from o_gateway.routes.runs import step_json
from o_gateway.state import GW, checked_id

router = APIRouter()


def _when(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError as exc:
        raise HTTPException(422, f"{name} must be an ISO 8601 datetime, got {value!r}") from exc


@route(router, "GET", "/v1/steps/")
async def list_steps(
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
    start_date: str | None = None,
    end_date: str | None = None,
    model: str | None = None,
    agent_id: str | None = None,
    trace_ids: Annotated[list[str] | None, Query()] = None,
    feedback: Literal["positive", "negative"] | None = None,
    has_feedback: bool | None = None,
    tags: Annotated[list[str] | None, Query()] = None,
) -> list[dict[str, Any]]:
    # Letta's list reads `order` as a boolean and so always lists newest first; here
    # `order` is honoured.
    q = Listing(
        "steps",
        key="seq",
        columns="*, (SELECT status FROM runs r WHERE r.id = steps.run_id) AS run_status",
    )
    if agent_id is not None:
        q.filter("agent_id = {}", checked_id(agent_id, "agent"))
    if model is not None:
        # Letta stores the model's own name; O the handle (provider/model): either matches.
        q.filter("(model = {} OR split_part(model, '/', 2) = {})", model, model)
    if (start := _when(start_date, "start_date")) is not None:
        q.filter("created_at >= {}", start)
    if (end := _when(end_date, "end_date")) is not None:
        q.filter("created_at <= {}", end)
    if trace_ids or feedback or has_feedback or tags:
        # O records no trace ids, feedback or tags on steps: nothing matches.
        q.filter("false")
    rows = await q.page(gw.pool, "step", before, after, order, limit, unknown_cursor="not_found")
    return [step_json(dict(r), {"status": r["run_status"]}) for r in rows]
