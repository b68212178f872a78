"""A message that arrives while a run of its conversation is in flight: the gateway's decisions.

Each policy (o_contracts/concurrency.py) but `enqueue` is one decision on the
conversation's subject, appended with the subject's expected last sequence
after reading, at that position, which runs are in flight (as `reject` does,
routes/messages.py: admitted). Of two requests racing, one decides first and
the other sees it. Event ids derive from the request's run, and a run the log
already knows is not decided again: a client's retry (the same otids or
Idempotency-Key) changes nothing twice.

- interrupt, rollback: the new run's RunQueued names the runs in flight it
  interrupts (`interrupts`, `rollback`). Each stops at its next safe point as
  if cancelled (the executor hears it as it hears a cancellation), and the new
  run, queued behind them, starts once they have stopped; with rollback it
  first records RunRolledBack for each (o_executor/live/execution.py).
- steer: the request's StartRun (`steer`) is sent first, then RunSteerRequested
  names the running run that should take its messages before its next model
  call. If that run ends without taking them, the request's own run runs them:
  the message is never lost, whatever dies when.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.events import RunQueued, RunSteerRequested
from o_contracts.ids import derived_id
from o_contracts.projection_names import RUNS
from o_gateway.commands import PRODUCER
from o_gateway.state import Gateway

# Runs of the conversation in flight ($1 agent, $2 conversation or NULL, $3 the new run):
# queued or running, oldest first.
_IN_FLIGHT = (
    "SELECT id FROM runs WHERE agent_id = $1 AND conversation_id IS NOT DISTINCT FROM $2"
    " AND status IN ('created', 'running') AND id <> $3 ORDER BY created_at, id"
)
# The run a steering request would go into: the conversation's running run that is not
# being stopped (a cancelled run takes nothing more), the latest if several.
_RUNNING = (
    "SELECT id FROM runs WHERE agent_id = $1 AND conversation_id IS NOT DISTINCT FROM $2"
    " AND status = 'running' AND NOT cancel_requested AND id <> $3"
    " ORDER BY created_at DESC, id DESC LIMIT 1"
)
# The run that took a message ($1) other than its own request's run ($2).
_TAKEN_BY = "SELECT run_id, seq FROM messages WHERE id = $1 AND run_id <> $2"


async def interrupting(
    gw: Gateway,
    command: Envelope[StartRun],
    rollback: bool,
    queued: Callable[[Envelope[StartRun]], Envelope[RunQueued]],
) -> int | None:
    """Admit the run, interrupting every run of its conversation in flight (and, with
    `rollback`, rolling them back). `queued` makes its RunQueued. Returns RunQueued's
    position; None if the run was admitted already (a retry: nothing is decided again)."""
    cmd = command.data
    lane = cmd.lane

    async def decide(last: int) -> Envelope[Any] | None:
        async with gw.reads.at(last, RUNS) as conn:
            if await conn.fetchval("SELECT 1 FROM runs WHERE id = $1", cmd.run_id):
                return None
            rows = await conn.fetch(_IN_FLIGHT, lane.agent_id, lane.conversation_id, cmd.run_id)
        event = queued(command)
        interrupts = [r["id"] for r in rows]
        return event.model_copy(
            update={
                "data": event.data.model_copy(
                    update={"interrupts": interrupts, "rollback": rollback and bool(interrupts)}
                )
            }
        )

    appended = await gw.eventlog.append_decided(lane.events, decide)
    return appended.seq if appended is not None else None


@dataclass(frozen=True)
class Steering:
    """Where a steering request went: into run `run_id`, asked for at log position `seq`
    (taken_by: the position of the message in the conversation, o_contracts/ordering.py)."""

    run_id: str
    seq: int


async def taken_by(gw: Gateway, command: Envelope[StartRun], seq: int) -> Steering | None:
    """The run that took the request's messages, as of log position `seq` (checked), with
    the position of its first message in the conversation; None if none did."""
    cmd = command.data
    async with gw.reads.at(seq, RUNS) as conn:
        row = await conn.fetchrow(_TAKEN_BY, cmd.messages[0].id, cmd.run_id)
    return Steering(row["run_id"], row["seq"]) if row is not None else None


async def steer(gw: Gateway, command: Envelope[StartRun]) -> Steering | None:
    """Ask the conversation's running run to take the request's messages.

    The request's StartRun (with `steer`) must be in the commands stream already:
    it runs the messages if no run takes them. None: no run is running (or the
    request's own run is known already), so nothing was asked; the run runs them.
    """
    cmd = command.data
    lane = cmd.lane
    if not cmd.messages:
        return None
    target: list[str] = []

    async def decide(last: int) -> Envelope[Any] | None:
        target.clear()
        async with gw.reads.at(last, RUNS) as conn:
            if await conn.fetchval("SELECT 1 FROM runs WHERE id = $1", cmd.run_id):
                return None
            running = await conn.fetchval(_RUNNING, lane.agent_id, lane.conversation_id, cmd.run_id)
        if running is None:
            return None
        target.append(running)
        return command.caused(
            RunSteerRequested(
                run_id=running,
                agent_id=cmd.agent_id,
                steer_run_id=cmd.run_id,
                messages=cmd.messages,
            ),
            aggregate_id=cmd.agent_id,
            producer=PRODUCER,
            id=derived_id("evt", cmd.run_id, "steer"),
        )

    appended = await gw.eventlog.append_decided(lane.events, decide)
    if appended is None or not target:
        return None
    return Steering(target[0], appended.seq)
