"""Appending a decision to an agent's hash-chained evolution subject."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from o_contracts import subjects
from o_contracts.envelope import Envelope, decode
from o_contracts.events.evolution import EvolutionDecided
from o_contracts.projection_names import EVOLUTION
from o_evolution.chain import GENESIS, link_hash
from o_runtime.eventlog import Appended, EventLog
from o_runtime.instruments import measured
from o_runtime.reads import ProjectionReads
from o_runtime.waiting import ProjectionWatcher

PRODUCER = "evolution"


async def last_hash(eventlog: EventLog, last_seq: int) -> str:
    if last_seq == 0:
        return GENESIS
    msg = await eventlog.js.get_msg(subjects.EVENTS_STREAM, last_seq, direct=True)
    event = decode(msg.data or b"").data
    assert isinstance(event, EvolutionDecided)
    return event.hash


def counted(decision: EvolutionDecided, appended: Appended) -> None:
    """o.evolution.decisions, by type: once per decision (a repeat the log deduplicated
    is the same decision)."""
    if not appended.duplicate:
        measured.evolution_decisions.add(1, {"decision": decision.type_name()})


async def recorded(conn: asyncpg.Connection, agent_id: str, event_id: str) -> int | None:
    """The position of the agent's decision `event_id`, if it is in its history."""
    seq = await conn.fetchval(
        "SELECT seq FROM evolution_history WHERE agent_id = $1 AND event_id = $2",
        agent_id,
        event_id,
    )
    return int(seq) if seq is not None else None


async def record(
    eventlog: EventLog,
    watcher: ProjectionWatcher,
    reads: ProjectionReads,
    cause: Envelope[Any],
    decision: EvolutionDecided,
    event_id: str,
) -> int:
    """Append `decision` after the subject's last one (linked to its hash); its seq once
    the evolution projection has it. The same `event_id` again is the same decision: found
    in the history, it is not appended again (the stream's duplicate window alone would
    let a command delivered again minutes later record it twice, after later ones)."""
    subject = subjects.evolution_subject(decision.agent_id)
    found: list[int] = []

    async def decide(last: int) -> Envelope[EvolutionDecided] | None:
        async with reads.at(last, EVOLUTION) as conn:
            seq = await recorded(conn, decision.agent_id, event_id)
        if seq is not None:
            found.append(seq)
            return None
        linked = decision.chained(await last_hash(eventlog, last), link_hash)
        return cause.caused(linked, aggregate_id=decision.agent_id, producer=PRODUCER, id=event_id)

    appended = await eventlog.append_decided(subject, decide)
    if appended is None:
        return found[-1]
    counted(decision, appended)
    await watcher.wait(appended.seq, EVOLUTION)
    return appended.seq


async def record_if(
    eventlog: EventLog,
    watcher: ProjectionWatcher,
    reads: ProjectionReads,
    cause: Envelope[Any],
    agent_id: str,
    decide: Callable[[asyncpg.Connection], Awaitable[EvolutionDecided | None]],
    event_id: str,
) -> int | None:
    """Append what `decide` makes of the agent's evolution state as the log has it at the
    subject's last decision (read from the projection at that position), or nothing;
    decided again if another decision lands first. Its seq once projected, or None."""
    subject = subjects.evolution_subject(agent_id)
    # The decision appended (the last one decided).
    made: list[EvolutionDecided] = []

    async def decide_at(last: int) -> Envelope[EvolutionDecided] | None:
        async with reads.at(last, EVOLUTION) as conn:
            # (Recorded already: a command delivered again, past the duplicate window.)
            if await recorded(conn, agent_id, event_id) is not None:
                return None
            decision = await decide(conn)
        if decision is None:
            return None
        made.append(decision)
        linked = decision.chained(await last_hash(eventlog, last), link_hash)
        return cause.caused(linked, aggregate_id=agent_id, producer=PRODUCER, id=event_id)

    appended = await eventlog.append_decided(subject, decide_at)
    if appended is None:
        return None
    counted(made[-1], appended)
    await watcher.wait(appended.seq, EVOLUTION)
    return appended.seq
