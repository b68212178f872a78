"""A fired slot becomes an ordinary run of its agent: RunQueued on the agent's subject (the
run lists as `created` at once, as an async message's does) and StartRun to the executor.

An event reactor (durable, acked after this is done) hands every ScheduleFired here at
least once: a scheduler killed between the fire and its run is handed it again (after the
reactor's ack wait) in whichever replica pulls next. Doing it twice does nothing twice:
the run's id comes from the fire, the command's and the RunQueued's from the run's (the
stream drops a repeat within its window; after it, the executor answers a StartRun of a
finished run from the log, and a RunQueued of a run the projection has is not appended).
The run is then the executor's like any other: one at a time per agent, resumed after a
crash, its usage recorded.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import asyncpg

from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.events import RunQueued, ScheduleFired
from o_contracts.ids import derived_id
from o_contracts.subjects import Lane
from o_runtime.eventlog import EventLog, Recorded
from o_schedules.plan import slot_key

PRODUCER = "scheduler"

# As a message request with Letta's defaults would record it, and where the run came from.
_VIEW = {
    "use_assistant_message": True,
    "assistant_message_tool_name": "send_message",
    "assistant_message_tool_kwarg": "message",
    "include_return_message_types": None,
    "stream_tokens": False,
}


def request_config(fired: ScheduleFired) -> dict[str, Any]:
    return _VIEW | {"schedule_id": fired.schedule_id, "scheduled_for": slot_key(fired.slot)}


def start_run(fired: Envelope[Any]) -> Envelope[StartRun]:
    e = fired.data
    assert isinstance(e, ScheduleFired)
    return fired.caused(
        StartRun(
            run_id=e.run_id,
            agent_id=e.agent_id,
            messages=e.messages,
            max_steps=e.max_steps,
            background=True,
            request_config=request_config(e),
        ),
        aggregate_id=e.agent_id,
        producer=PRODUCER,
        # (o_gateway/idempotency.py: command_id_for)
        id=derived_id("cmd", e.run_id, "start"),
    )


@dataclass
class Dispatch:
    eventlog: EventLog
    pool: asyncpg.Pool

    async def on_fired(self, records: list[Recorded]) -> None:
        # Each agent's fires in slot order (its runs queue in command order); agents at once.
        by_agent: dict[str, list[Recorded]] = {}
        for rec in records:
            by_agent.setdefault(str(getattr(rec.envelope.data, "agent_id", "")), []).append(rec)
        await asyncio.gather(*(self._in_order(recs) for recs in by_agent.values()))

    async def _in_order(self, records: list[Recorded]) -> None:
        for rec in records:
            await self.start(rec.envelope)

    async def start(self, fired: Envelope[Any]) -> None:
        command = start_run(fired)
        cmd = command.data
        lane = Lane(cmd.agent_id)
        if await self.pool.fetchval("SELECT 1 FROM runs WHERE id = $1", cmd.run_id) is None:
            queued = command.caused(
                RunQueued(
                    run_id=cmd.run_id,
                    agent_id=cmd.agent_id,
                    background=True,
                    request_config=cmd.request_config,
                ),
                aggregate_id=cmd.agent_id,
                producer=PRODUCER,
                id=derived_id("evt", cmd.run_id, "queued"),
            )
            await self.eventlog.append(lane.events, queued)
        await self.eventlog.send_command(lane.commands, command)
