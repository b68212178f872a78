"""The scheduler as a component of a service process: its projection, its command consumer,
its timer and the follower that turns fires into runs.

It lives in the evolution service's process (o_evolution/service.py): that process already
decides when agents think on their own (sleep-time turns), and it needs nothing the
scheduler does not bring. Any number of replicas may run it: every fire is decided on
the log (timer.py), so a second replica only shares the work. Nothing here depends on
that process otherwise; another service could host it the same way.
"""

from __future__ import annotations

from o_contracts import subjects
from o_contracts.base import Message
from o_contracts.events import AgentDeleted
from o_contracts.schedule_commands import CreateSchedule, DeleteSchedule, UpdateSchedule
from o_runtime.commands import CommandConsumer
from o_runtime.projector import Projector
from o_runtime.reactor import Reaction
from o_runtime.service import Service
from o_schedules.commands import ScheduleCommands
from o_schedules.dispatch import Dispatch, FiresFollower
from o_schedules.projection import schedules
from o_schedules.timer import Timer


class Scheduler:
    def __init__(self, service: Service) -> None:
        self.service = service

    def setup(self) -> None:
        """Register with the service (call from its setup())."""
        s = self.service
        self.timer = Timer(s.eventlog, s.pool)
        self.commands = ScheduleCommands(s.eventlog, s.reads)
        s.projectors.append(
            Projector(
                schedules,
                s.pool,
                s.eventlog,
                on_committed=self._committed,
                settings=s.settings.projections,
                on_following=s.watcher.following,
            )
        )
        s.consume(
            CommandConsumer(
                s.eventlog,
                "schedules",
                subjects.SCHEDULE_COMMANDS,
                {
                    CreateSchedule: self.commands.create,
                    UpdateSchedule: self.commands.update,
                    DeleteSchedule: self.commands.delete,
                },
            )
        )
        self.fires = FiresFollower(s.eventlog, Dispatch(s.eventlog, s.pool), s.settings.retries)

    def agent_reactions(self) -> dict[type[Message], Reaction]:
        """What the scheduler does on agents' events (for the host's reactor on them)."""
        return {AgentDeleted: self.commands.on_agents_deleted}

    def _committed(self, projection: str, seq: int) -> None:
        self.service.watcher.applied(projection, seq)
        self.timer.poke()

    async def start(self) -> None:
        await self.fires.start()
        await self.timer.start()

    async def stop(self) -> None:
        await self.timer.stop()
        await self.fires.stop()
