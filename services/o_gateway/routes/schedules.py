"""Scheduled runs, O's extension: `/v1/agents/{agent_id}/schedules` (tag "schedules").

Each change is a command to the scheduler (o_schedules, in the evolution service's
process), which records it on the schedule's subject; reads come from its projection.
What is checked here (a cron expression, a time zone, a one-shot in the past) is checked
again by the scheduler for commands from outside; here it is answered with 422 naming the
field. docs/schedules.md.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from o_contracts import subjects
from o_contracts.base import Command, Reply
from o_contracts.envelope import Envelope
from o_contracts.ids import derived_id
from o_contracts.limits import MAX_MESSAGES_PER_REQUEST
from o_contracts.projection_names import SCHEDULES
from o_contracts.schedule_commands import CreateSchedule, DeleteSchedule, UpdateSchedule
from o_contracts.schedules import (
    MAX_CATCH_UP,
    MAX_GRACE_SECONDS,
    MissedPolicy,
    ScheduleChanges,
    ScheduledMessage,
    ScheduleSpec,
)
from o_gateway.commands import PRODUCER, answered
from o_gateway.idempotency import IdempotencyKey, checked_key, resource_id
from o_gateway.images import store_images
from o_gateway.render import iso
from o_gateway.routes.paths import route
from o_gateway.schemas import Content, MessageCreateBody, SendMessageBody
from o_gateway.state import GW, Gateway, checked_id
from o_schedules import slots

router = APIRouter(tags=["schedules"])
PREFIX = "/v1/agents/{agent_id}/schedules"
COMMAND_TIMEOUT = 15.0
# How many upcoming slots a schedule shows (`next_fire_at`).
NEXT_FIRES = 5


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, max_length=256)
    # Five fields, or six with seconds first; or @hourly, @daily ...
    cron: str | None = Field(default=None, max_length=256)
    # A one-shot: when (with an offset; without one, a wall time in `timezone`).
    at: datetime | None = None
    # IANA name; default: the agent's `timezone` (UTC if it has none).
    timezone: str | None = Field(default=None, max_length=64)
    # What to send, as in a message request: `messages`, or `input`.
    messages: list[MessageCreateBody] | None = Field(
        default=None, min_length=1, max_length=MAX_MESSAGES_PER_REQUEST
    )
    input: Content | None = None
    _request: SendMessageBody | None = PrivateAttr(default=None)

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None:
            slots.check_cron(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str | None) -> str | None:
        if value is not None:
            slots.zone(value)
        return value

    @model_validator(mode="after")
    def _checked(self) -> _Body:
        if self.cron is not None and self.at is not None:
            raise ValueError("give `cron` or `at`, not both")
        if self.messages is not None or self.input is not None:
            # The same bounds as a message request's (sizes, images).
            self._request = SendMessageBody(messages=self.messages, input=self.input)
        return self

    def scheduled_messages(self) -> list[ScheduledMessage] | None:
        request = self._request
        if request is None:
            return None
        if request.input is not None:
            body = MessageCreateBody(role="user", content=request.input)
            return [_scheduled(body)]
        return [_scheduled(m) for m in request.messages or () if isinstance(m, MessageCreateBody)]


def _scheduled(m: MessageCreateBody) -> ScheduledMessage:
    return ScheduledMessage(role=m.role, content=m.text(), parts=m.parts(), name=m.name)


class ScheduleBody(_Body):
    max_steps: int = Field(default=50, ge=1, le=1000)
    # Slots missed while O was down (more than grace_seconds late): skip them, run the
    # latest once, or run each (the latest max_catch_up).
    missed: MissedPolicy = "run_once"
    max_catch_up: int = Field(default=10, ge=1, le=MAX_CATCH_UP)
    grace_seconds: float = Field(default=60.0, ge=0.0, le=MAX_GRACE_SECONDS)
    enabled: bool = True

    @model_validator(mode="after")
    def _complete(self) -> ScheduleBody:
        if self.cron is None and self.at is None:
            raise ValueError("give `cron` (a cron expression) or `at` (a one-shot time)")
        if self._request is None:
            raise ValueError("give what to send: `messages` or `input`")
        return self


class ScheduleChangesBody(_Body):
    """A PATCH: only the fields given change (`cron` replaces `at`, and the other way)."""

    max_steps: int | None = Field(default=None, ge=1, le=1000)
    missed: MissedPolicy | None = None
    max_catch_up: int | None = Field(default=None, ge=1, le=MAX_CATCH_UP)
    grace_seconds: float | None = Field(default=None, ge=0.0, le=MAX_GRACE_SECONDS)
    enabled: bool | None = None


def invalid(field: str, message: str) -> HTTPException:
    """A 422 shaped as FastAPI's own, naming the field."""
    return HTTPException(422, [{"type": "value_error", "loc": ["body", field], "msg": message}])


def checked(spec: ScheduleSpec, now: datetime) -> ScheduleSpec:
    try:
        slots.check_new(spec, now)
    except slots.InvalidSchedule as exc:
        raise invalid(exc.field, exc.message) from None
    return spec


def agent_timezone(agent: dict[str, Any]) -> str:
    name = agent.get("timezone") or "UTC"
    try:
        slots.zone(name)
    except slots.InvalidSchedule:
        raise invalid(
            "timezone", f"the agent's timezone {name!r} is not an IANA time zone: give one"
        ) from None
    return str(name)


async def _stored(gw: Gateway, body: _Body) -> list[ScheduledMessage] | None:
    if body._request is not None:
        await store_images(gw, body._request)
    return body.scheduled_messages()


async def _command(gw: Gateway, agent_id: str, command: Command, command_id: str | None) -> Reply:
    envelope = Envelope.wrap(command, aggregate_id=agent_id, producer=PRODUCER, id=command_id)
    reply = await answered(
        gw,
        subjects.schedule_command_subject(agent_id),
        envelope,
        COMMAND_TIMEOUT,
        "the scheduler did not answer in time; the change may still apply",
    )
    await gw.visible(reply.seq, SCHEDULES)
    return reply


_SCHEDULE = "SELECT * FROM schedules WHERE id = $1 AND agent_id = $2"


async def _row(gw: Gateway, agent_id: str, schedule_id: str) -> dict[str, Any]:
    row = await gw.pool.fetchrow(_SCHEDULE, checked_id(schedule_id, "schedule"), agent_id)
    if row is None:
        raise HTTPException(404, f"schedule {schedule_id} not found")
    return dict(row)


def schedule_json(row: dict[str, Any], now: datetime) -> dict[str, Any]:
    spec = ScheduleSpec.model_validate(row["spec"])
    done = row["next_due_at"] is None
    upcoming = (
        []
        if done or not row["enabled"]
        else slots.Slots(spec).upcoming(max(row["after"], now), NEXT_FIRES)
    )
    return {
        "id": row["id"],
        "agent_id": row["agent_id"],
        "name": spec.name,
        "cron": spec.cron,
        "at": iso(spec.at),
        "timezone": spec.timezone,
        "messages": [m.model_dump(mode="json", exclude_none=True) for m in spec.messages],
        "max_steps": spec.max_steps,
        "missed": spec.missed,
        "max_catch_up": spec.max_catch_up,
        "grace_seconds": spec.grace_seconds,
        "enabled": row["enabled"],
        # active; disabled; completed (a one-shot that fired, or was skipped).
        "status": "completed" if done else ("active" if row["enabled"] else "disabled"),
        "next_fire_at": [iso(s) for s in upcoming],
        "fires": row["fires"],
        "skipped": row["skipped"],
        "last_fired_slot": iso(row["last_slot"]),
        "last_run_id": row["last_run_id"],
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


async def _answer(gw: Gateway, agent_id: str, schedule_id: str) -> dict[str, Any]:
    return schedule_json(await _row(gw, agent_id, schedule_id), datetime.now(UTC))


@route(router, "POST", PREFIX, status_code=201)
async def create_schedule(
    agent_id: str, body: ScheduleBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    """Schedule runs of the agent: a cron expression in a time zone, or one time (`at`)."""
    agent = await gw.agent_row(checked_id(agent_id, "agent"))
    key = checked_key(idempotency_key)
    schedule_id = resource_id("schedule", key, agent_id)
    if key is not None:
        found = await gw.pool.fetchrow(_SCHEDULE, schedule_id, agent_id)
        if found is not None:
            return schedule_json(dict(found), datetime.now(UTC))  # (a retry)
    messages = await _stored(gw, body)
    assert messages is not None
    spec = ScheduleSpec(
        name=body.name,
        cron=body.cron,
        at=body.at,
        timezone=body.timezone or agent_timezone(agent),
        messages=messages,
        max_steps=body.max_steps,
        missed=body.missed,
        max_catch_up=body.max_catch_up,
        grace_seconds=body.grace_seconds,
    )
    if spec.at is not None:
        spec = spec.model_copy(update={"at": slots.instant(spec.at, spec.timezone)})
    command = CreateSchedule(
        agent_id=agent_id,
        schedule_id=schedule_id,
        spec=checked(spec, datetime.now(UTC)),
        enabled=body.enabled,
    )
    command_id = derived_id("cmd", schedule_id, "create") if key is not None else None
    await _command(gw, agent_id, command, command_id)
    return await _answer(gw, agent_id, schedule_id)


@route(router, "GET", PREFIX)
async def list_schedules(agent_id: str, gw: GW) -> list[dict[str, Any]]:
    await gw.agent_row(checked_id(agent_id, "agent"))
    rows = await gw.pool.fetch(
        "SELECT * FROM schedules WHERE agent_id = $1 ORDER BY created_at, id", agent_id
    )
    now = datetime.now(UTC)
    return [schedule_json(dict(r), now) for r in rows]


@route(router, "GET", PREFIX + "/{schedule_id}")
async def get_schedule(agent_id: str, schedule_id: str, gw: GW) -> dict[str, Any]:
    await gw.agent_row(checked_id(agent_id, "agent"))
    return await _answer(gw, agent_id, schedule_id)


@route(router, "PATCH", PREFIX + "/{schedule_id}")
async def update_schedule(
    agent_id: str, schedule_id: str, body: ScheduleChangesBody, gw: GW
) -> dict[str, Any]:
    """Enable or disable the schedule (`enabled`), or change when it fires or what it sends.
    A schedule enabled again, or whose timing changed, counts its slots from now."""
    await gw.agent_row(checked_id(agent_id, "agent"))
    row = await _row(gw, agent_id, schedule_id)
    at = body.at
    if at is not None:
        zone = body.timezone or ScheduleSpec.model_validate(row["spec"]).timezone
        at = slots.instant(at, zone)
    changes = ScheduleChanges(
        name=body.name,
        cron=body.cron,
        at=at,
        timezone=body.timezone,
        messages=await _stored(gw, body),
        max_steps=body.max_steps,
        missed=body.missed,
        max_catch_up=body.max_catch_up,
        grace_seconds=body.grace_seconds,
        enabled=body.enabled,
    )
    was = ScheduleSpec.model_validate(row["spec"])
    spec = changes.applied_to(was)
    if spec.timing() != was.timing():
        checked(spec, datetime.now(UTC))
    command = UpdateSchedule(agent_id=agent_id, schedule_id=row["id"], changes=changes)
    await _command(gw, agent_id, command, None)
    return await _answer(gw, agent_id, schedule_id)


@route(router, "DELETE", PREFIX + "/{schedule_id}")
async def delete_schedule(agent_id: str, schedule_id: str, gw: GW) -> dict[str, Any]:
    """Delete the schedule: nothing fires from now on (its runs stay the agent's)."""
    await gw.agent_row(checked_id(agent_id, "agent"))
    row = await _row(gw, agent_id, schedule_id)
    command = DeleteSchedule(agent_id=agent_id, schedule_id=row["id"])
    await _command(gw, agent_id, command, None)
    return {"id": row["id"], "deleted": True}


@route(router, "GET", PREFIX + "/{schedule_id}/fires")
async def list_fires(
    agent_id: str,
    schedule_id: str,
    gw: GW,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[dict[str, Any]]:
    """The slots the schedule fired, latest first, each with the run it started."""
    await gw.agent_row(checked_id(agent_id, "agent"))
    row = await _row(gw, agent_id, schedule_id)
    fires = await gw.pool.fetch(
        "SELECT slot, run_id, late, fired_at FROM schedule_fires WHERE schedule_id = $1"
        " ORDER BY slot DESC LIMIT $2",
        row["id"],
        limit,
    )
    return [
        {
            "slot": iso(f["slot"]),
            "run_id": f["run_id"],
            "late": f["late"],
            "fired_at": iso(f["fired_at"]),
        }
        for f in fires
    ]
