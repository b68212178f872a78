"""`GET /v1/steps/`: every agent's steps, with Letta's filters; `PATCH
/v1/steps/{step_id}/feedback`: a step rated, recorded on its run's subject."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from o_contracts.envelope import Envelope
from o_contracts.events import StepFeedbackGiven
from o_contracts.projection_names import RUNS
from o_contracts.subjects import Lane
from o_gateway.commands import PRODUCER
from o_gateway.pagination import Listing
from o_gateway.routes.paths import route
from o_gateway.routes.runs import step_json, step_row, step_view
from o_gateway.schemas import StepFeedbackBody
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
    if feedback is not None:
        q.filter("feedback = {}", feedback)
    if has_feedback is not None:
        q.filter("feedback IS NOT NULL" if has_feedback else "feedback IS NULL")
    if tags:
        # Any of them, as Letta's other tag filters match by default (its step list
        # accepts `tags` and ignores it).
        q.filter("tags && {}::text[]", tags)
    if trace_ids:
        # O records no trace ids on steps: nothing matches.
        q.filter("false")
    rows = await q.page(gw.pool, "step", before, after, order, limit, unknown_cursor="not_found")
    return [step_json(dict(r), {"status": r["run_status"]}) for r in rows]


def feedback_given(step: dict[str, Any], body: StepFeedbackBody) -> StepFeedbackGiven:
    """What a feedback request records: the feedback as given (null clears it), and the
    tags only when some are given (Letta keeps a step's tags on an empty list)."""
    return StepFeedbackGiven(
        run_id=step["run_id"],
        agent_id=step["agent_id"],
        step_id=step["id"],
        feedback=body.feedback,
        tags=body.tags or None,
    )


@route(router, "PATCH", "/v1/steps/{step_id}/feedback")
async def modify_feedback_for_step(step_id: str, body: StepFeedbackBody, gw: GW) -> dict[str, Any]:
    step = await step_row(gw, step_id)
    conversation_id = await gw.pool.fetchval(
        "SELECT conversation_id FROM runs WHERE id = $1", step["run_id"]
    )
    # On the run's own subject, after the step's LLMResponded: the runs projection
    # applies it to a row that exists, in a rebuild as live.
    appended = await gw.eventlog.append(
        Lane(step["agent_id"], conversation_id).events,
        Envelope.wrap(
            feedback_given(step, body),
            aggregate_id=step["agent_id"],
            producer=PRODUCER,
            correlation_id=step["run_id"],
        ),
    )
    await gw.visible(appended.seq, RUNS)
    return await step_view(gw, step["id"])
