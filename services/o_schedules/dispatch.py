"""A fired slot becomes an ordinary run of its agent: RunQueued on the agent's subject (the
run lists as `created` at once, as an async message's does) and StartRun to the executor.

A durable consumer of the schedules' subjects hands every ScheduleFired here at least
once: each is acknowledged on its own once its run is on its way, so a scheduler killed
between a fire and its run has the fire handed again (after DISPATCH_ACK_WAIT) to
whichever replica pulls next. (Not o_runtime's EventReactor, which handles one batch at a
time in log order: fires are dispatched for many agents at once, each agent's in order.)
Doing it twice does nothing twice:
the run's id comes from the fire, the command's and the RunQueued's from the run's (the
stream drops a repeat within its window; after it, the executor answers a StartRun of a
finished run from the log, and a RunQueued of a run the projection has is not appended).
The run is then the executor's like any other: one at a time per agent, resumed after a
crash, its usage recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import asyncpg
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from o_contracts import subjects
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope, MalformedMessage, decode, known_type
from o_contracts.events import RunQueued, ScheduleFired
from o_contracts.ids import derived_id
from o_contracts.subjects import Lane
from o_runtime.commands import MAX_DELIVERIES, bind_durable, pulled
from o_runtime.dead_letters import dead_letter
from o_runtime.eventlog import EventLog
from o_runtime.outages import is_outage
from o_runtime.retries import Retries
from o_schedules.plan import slot_key

log = logging.getLogger(__name__)
PRODUCER = "scheduler"
CONSUMER = "schedule-dispatch"
# A fire held by a process that died is handed out again after this long.
DISPATCH_ACK_WAIT = 5.0
# Fires pulled at once, and in hand across all replicas at most.
BATCH = 256
MAX_IN_HAND = 10_000

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


def dispatch_consumer_config() -> ConsumerConfig:
    """The fires' consumer on the server: fires from its making on, each acked alone."""
    return ConsumerConfig(
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=DISPATCH_ACK_WAIT,
        deliver_policy=DeliverPolicy.NEW,
        max_ack_pending=MAX_IN_HAND,
    )


class FiresFollower:
    """Pulls the schedules' events and dispatches each ScheduleFired, acked one by one."""

    def __init__(self, eventlog: EventLog, dispatch: Dispatch, retries: Retries) -> None:
        self.eventlog = eventlog
        self.dispatch = dispatch
        self.retries = retries
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # (The durable is made by the setup role: o_setup/topology.py.)
        self._sub = await bind_durable(
            self.eventlog,
            subjects.SCHEDULE_EVENTS,
            subjects.EVENTS_STREAM,
            CONSUMER,
            dispatch_consumer_config(),
        )
        self._task = asyncio.create_task(self._pull(), name=CONSUMER)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()

    async def _pull(self) -> None:
        while True:
            msgs = await pulled(self._sub, BATCH, CONSUMER)
            # Each agent's fires in the order they came (its runs queue in command order);
            # agents at once.
            by_agent: dict[str, list[tuple[Msg, Envelope[Any]]]] = {}
            for msg in msgs:
                fire = _fire(msg)
                if fire is None:
                    await msg.ack()  # (the schedules' other events)
                    continue
                by_agent.setdefault(fire[0], []).append((msg, fire[1]))
            await asyncio.gather(*(self._in_order(fires) for fires in by_agent.values()))

    async def _in_order(self, fires: list[tuple[Msg, Envelope[Any]]]) -> None:
        for msg, fire in fires:
            await self._handle(msg, fire)

    async def _handle(self, msg: Msg, fire: Envelope[Any]) -> None:
        meta = msg.metadata
        try:
            await self.dispatch.start(fire)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outage = is_outage(exc)
            if outage or meta.num_delivered < MAX_DELIVERIES:
                log.warning("dispatching %s failed (%r); will retry", fire.data.run_id, exc)
                await msg.nak(delay=self.retries.delay(meta.num_delivered, outage=outage))
                return
            await dead_letter(
                self.eventlog.js,
                CONSUMER,
                msg.data,
                f"failed {MAX_DELIVERIES} times: {exc!r}",
                origin_subject=msg.subject,
                origin_seq=meta.sequence.stream,
            )
        await msg.ack()


def _fire(msg: Msg) -> tuple[str, Envelope[Any]] | None:
    """The ScheduleFired in `msg` and its agent; None for any other event."""
    if known_type(msg.data) != ScheduleFired.type_name():
        return None
    try:
        envelope = decode(msg.data)
    except MalformedMessage:
        return None  # (not an event anyone could have appended: projections refuse it too)
    assert isinstance(envelope.data, ScheduleFired)
    return envelope.data.agent_id, envelope
