"""The scheduler's commands (o_contracts/schedule_commands.py) and its reaction to an agent's
deletion: each decides on the schedule's subject as the log has it and appends with its
last sequence expected, so a command delivered again, or racing another, changes nothing
twice:

- CreateSchedule: a subject that has events is created already (its id is the command's);
- UpdateSchedule: a change the projection shows taken (schedule_commands) is answered
  from there;
- DeleteSchedule, and AgentDeleted: a subject that ends with ScheduleDeleted is done.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from nats.js.errors import NotFoundError

from o_contracts import subjects
from o_contracts.base import Message, Reply
from o_contracts.envelope import Envelope, decode
from o_contracts.events import AgentDeleted, ScheduleCreated, ScheduleDeleted, ScheduleUpdated
from o_contracts.ids import derived_id
from o_contracts.projection_names import AGENTS, SCHEDULES
from o_contracts.schedule_commands import CreateSchedule, DeleteSchedule, UpdateSchedule
from o_contracts.schedules import ScheduleSpec
from o_runtime.commands import Delivery
from o_runtime.eventlog import AppendRejected, ConcurrencyConflict, EventLog, Recorded
from o_runtime.reads import ProjectionReads
from o_schedules import slots

log = logging.getLogger(__name__)
PRODUCER = "scheduler"

_ROW = (
    "SELECT s.agent_id, s.spec, s.enabled, (SELECT c.seq FROM schedule_commands c"
    " WHERE c.command_id = $2) AS taken FROM schedules s WHERE s.id = $1"
)


async def last_event(eventlog: EventLog, subject: str) -> tuple[int, Envelope[Message] | None]:
    """The subject's last event and its sequence; (0, None) for a subject with none."""
    try:
        msg = await eventlog.js.get_last_msg(subjects.EVENTS_STREAM, subject, direct=True)
    except NotFoundError:
        return 0, None
    return int(msg.seq or 0), decode(msg.data or b"")


def asked_at(env: Envelope[Any]) -> datetime:
    """When a command was asked: its envelope's time, never later than now.

    A command judged as of when it is handled would be refused for waiting out an outage
    in the log: a one-shot a few seconds ahead, accepted by the gateway, found in the past
    once the scheduler is back. Judged and counted from when it was asked, its slot is due
    (on time, or missed by the schedule's own policy), as if the scheduler had been up."""
    sent = env.time if env.time.tzinfo is not None else env.time.replace(tzinfo=UTC)
    return min(sent, datetime.now(UTC))


def check_new(spec: ScheduleSpec, now: datetime) -> None:
    """slots.check_new, refused as the command's 422."""
    try:
        slots.check_new(spec, now)
    except slots.InvalidSchedule as exc:
        raise AppendRejected(str(exc), 422) from None


@dataclass
class ScheduleCommands:
    eventlog: EventLog
    reads: ProjectionReads

    async def create(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd = env.data
        assert isinstance(cmd, CreateSchedule)
        subject = subjects.schedule_subject(cmd.schedule_id)
        last, _ = await last_event(self.eventlog, subject)
        if last:
            # Created already (this command before, or one with the same schedule id).
            return self._done(cmd.schedule_id, last)
        when = asked_at(env)
        check_new(cmd.spec, when)
        await self._agent(cmd.agent_id)
        event = env.caused(
            ScheduleCreated(
                schedule_id=cmd.schedule_id,
                agent_id=cmd.agent_id,
                spec=cmd.spec,
                enabled=cmd.enabled,
                after=when,
            ),
            aggregate_id=cmd.schedule_id,
            producer=PRODUCER,
            id=derived_id("evt", cmd.schedule_id, "created"),
        )
        try:
            seq = (await self.eventlog.append(subject, event, expected_last_seq=0)).seq
        except ConcurrencyConflict:
            return self._done(cmd.schedule_id, (await last_event(self.eventlog, subject))[0])
        # Deleted while we made it? The deletion's reaction may have read the agent's
        # schedules before this one: end it here (on_agents_deleted explains the order).
        if not await self._exists(cmd.agent_id):
            await self.end(env, cmd.schedule_id, "agent_deleted")
            raise AppendRejected(f"Agent {cmd.agent_id} not found", 404)
        return self._done(cmd.schedule_id, seq)

    async def update(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd = env.data
        assert isinstance(cmd, UpdateSchedule)
        subject = subjects.schedule_subject(cmd.schedule_id)
        taken: list[int] = []

        async def decide(last: int) -> Envelope[Any] | None:
            if not last:
                raise self._missing(cmd.schedule_id)
            checked = self.reads.row_at(last, SCHEDULES, _ROW, cmd.schedule_id, env.id)
            async with checked as (_, row):
                if row is None or row["agent_id"] != cmd.agent_id:
                    raise self._missing(cmd.schedule_id)
                if row["taken"] is not None:
                    taken.append(row["taken"])
                    return None
                was = ScheduleSpec.model_validate(row["spec"])
                enabled_before = bool(row["enabled"])
            try:
                spec = cmd.changes.applied_to(was)
            except ValueError as exc:
                raise AppendRejected(f"changes: {exc}", 422) from None
            now = asked_at(env)
            if spec.timing() != was.timing():
                check_new(spec, now)
            enabled = enabled_before if cmd.changes.enabled is None else cmd.changes.enabled
            # Slots before now no longer count once the timing changed, or for a schedule
            # enabled again (those that passed while it was off are not "missed").
            afresh = spec.timing() != was.timing() or (enabled and not enabled_before)
            return env.caused(
                ScheduleUpdated(
                    schedule_id=cmd.schedule_id,
                    agent_id=cmd.agent_id,
                    spec=spec,
                    enabled=enabled,
                    after=now if afresh else None,
                ),
                aggregate_id=cmd.schedule_id,
                producer=PRODUCER,
                id=derived_id("evt", env.id, "updated"),
            )

        appended = await self.eventlog.append_decided(subject, decide)
        return self._done(cmd.schedule_id, appended.seq if appended else taken[0])

    async def delete(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd = env.data
        assert isinstance(cmd, DeleteSchedule)
        _, event = await last_event(self.eventlog, subjects.schedule_subject(cmd.schedule_id))
        if event is None or getattr(event.data, "agent_id", None) != cmd.agent_id:
            raise self._missing(cmd.schedule_id)
        seq = await self.end(env, cmd.schedule_id, "requested")
        return self._done(cmd.schedule_id, seq)

    async def end(
        self, cause: Envelope[Any], schedule_id: str, reason: Literal["requested", "agent_deleted"]
    ) -> int:
        """Append the schedule's ScheduleDeleted (once); the subject's position after it."""
        subject = subjects.schedule_subject(schedule_id)
        for _ in range(10):
            last, event = await last_event(self.eventlog, subject)
            if event is None or isinstance(event.data, ScheduleDeleted):
                return last
            deleted = cause.caused(
                ScheduleDeleted(
                    schedule_id=schedule_id,
                    agent_id=str(getattr(event.data, "agent_id", "")),
                    reason=reason,
                ),
                aggregate_id=schedule_id,
                producer=PRODUCER,
                id=derived_id("evt", schedule_id, "deleted"),
            )
            try:
                return (await self.eventlog.append(subject, deleted, expected_last_seq=last)).seq
            except ConcurrencyConflict:
                continue  # (a slot fired meanwhile)
        raise AppendRejected(f"too many concurrent changes to {subject}; try again", 409)

    async def on_agents_deleted(self, records: list[Recorded]) -> None:
        """A deleted agent's schedules go with it.

        The read waits until the agents projection shows the deletion, then until the
        schedules projection shows every schedule event the log holds: a schedule created
        before this read is found here, and one created after it finds the agent gone when
        its CreateSchedule looks again (create), so none outlives its agent. (Until then the
        timer fires no schedule whose agent it cannot see.)
        """
        for rec in records:
            agent_id = rec.envelope.data
            assert isinstance(agent_id, AgentDeleted)
            await self.reads.watcher.wait(rec.seq, AGENTS, timeout=30.0)
            # (The last event on any schedule's subject: a wildcard direct get.)
            end = await self.eventlog.last_seq(subjects.SCHEDULE_EVENTS)
            async with self.reads.at(end, SCHEDULES, timeout=30.0) as conn:
                ids = await conn.fetch(
                    "SELECT id FROM schedules WHERE agent_id = $1", agent_id.agent_id
                )
            for row in ids:
                await self.end(rec.envelope, row["id"], "agent_deleted")
            if ids:
                log.info("agent %s deleted: %d schedules with it", agent_id.agent_id, len(ids))

    async def _agent(self, agent_id: str) -> None:
        if not await self._exists(agent_id):
            raise AppendRejected(f"Agent {agent_id} not found", 404)

    async def _exists(self, agent_id: str) -> bool:
        found = await self.reads.pool.fetchval("SELECT 1 FROM agents WHERE id = $1", agent_id)
        return found is not None

    @staticmethod
    def _missing(schedule_id: str) -> AppendRejected:
        return AppendRejected(f"schedule {schedule_id} not found", 404)

    @staticmethod
    def _done(schedule_id: str, seq: int) -> Reply:
        return Reply(ok=True, seq=seq, result={"schedule_id": schedule_id})
