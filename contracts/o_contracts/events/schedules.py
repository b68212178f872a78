"""Scheduled runs' events, appended by the scheduler (in the evolution service's process) on
the schedule's own subject, `o.evt.schedule.<schedule_id>`, one after the other (expected
last subject sequence).

A slot fires exactly once because its ScheduleFired is appended only on the schedule's
state as the log has it (every slot up to `after` is spent) and only if the subject has not
moved since: a second scheduler, a restarted one or a repeated append finds the slot spent.
The fired slot's run id derives from the schedule and the slot, and the run starts from
its ScheduleFired (o_schedules/dispatch.py), so every fire is one run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from o_contracts.base import Event
from o_contracts.models import ChatMessage
from o_contracts.schedules import ScheduleSpec


class ScheduleCreated(Event):
    schedule_id: str
    agent_id: str
    spec: ScheduleSpec
    enabled: bool = True
    # The schedule's slots are those after this instant (its creation).
    after: datetime


class ScheduleUpdated(Event):
    """The schedule from now on (its whole spec, and whether it is enabled)."""

    schedule_id: str
    agent_id: str
    spec: ScheduleSpec
    enabled: bool
    # Set when earlier slots no longer count: its timing changed, or it was enabled
    # again (slots that passed while it was disabled are neither run nor missed).
    after: datetime | None = None


class ScheduleFired(Event):
    """One slot fired: the run it starts, with that run's input as the schedule had it."""

    schedule_id: str
    agent_id: str
    slot: datetime
    # derived_id("run", schedule_id, slot in UTC, ISO 8601): o_schedules/plan.py.
    run_id: str
    messages: list[ChatMessage]
    max_steps: int = Field(default=50, ge=1, le=1000)
    # A slot missed while no scheduler ran, fired late by the schedule's policy.
    late: bool = False


class ScheduleSlotsSkipped(Event):
    """Missed slots the schedule's policy does not run (`first` to `last`, `count` of them)."""

    schedule_id: str
    agent_id: str
    first: datetime
    last: datetime
    count: int = Field(ge=1)
    # False when there were too many to count (count is then a lower bound).
    counted_all: bool = True
    reason: str = ""


class ScheduleDeleted(Event):
    schedule_id: str
    agent_id: str
    # requested: through the API or a DeleteSchedule; agent_deleted: its agent went.
    reason: Literal["requested", "agent_deleted"] = "requested"
