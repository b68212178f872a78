"""Commands to the scheduler, on `o.cmd.schedule.<agent_id>` (the gateway's schedule routes
send them; outside systems may too). Each is answered with a Reply (ok with the schedule's
id and log position, or the refusal's status and reason) and leaves its fact on the
schedule's subject (events/schedules.py). A command delivered again changes nothing.
"""

from __future__ import annotations

from o_contracts.base import Command
from o_contracts.schedules import ScheduleChanges, ScheduleSpec


class CreateSchedule(Command):
    """Make a schedule for an agent (a one-shot `at` must be in the future)."""

    agent_id: str
    schedule_id: str
    spec: ScheduleSpec
    enabled: bool = True


class UpdateSchedule(Command):
    """Change a schedule: enable or disable it, or change when or what it sends."""

    agent_id: str
    schedule_id: str
    changes: ScheduleChanges


class DeleteSchedule(Command):
    agent_id: str
    schedule_id: str
