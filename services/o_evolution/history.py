"""Appending a decision to an agent's hash-chained evolution subject."""

from __future__ import annotations

from typing import Any

from o_contracts import subjects
from o_contracts.envelope import Envelope, decode
from o_contracts.events.evolution import EvolutionDecided
from o_contracts.projection_names import EVOLUTION
from o_evolution.chain import GENESIS, link_hash
from o_runtime.eventlog import EventLog
from o_runtime.waiting import ProjectionWatcher

PRODUCER = "evolution"


async def last_hash(eventlog: EventLog, last_seq: int) -> str:
    if last_seq == 0:
        return GENESIS
    msg = await eventlog.js.get_msg(subjects.EVENTS_STREAM, last_seq, direct=True)
    event = decode(msg.data or b"").data
    assert isinstance(event, EvolutionDecided)
    return event.hash


async def record(
    eventlog: EventLog,
    watcher: ProjectionWatcher,
    cause: Envelope[Any],
    decision: EvolutionDecided,
    event_id: str,
) -> int:
    """Append `decision` after the subject's last one (linked to its hash); its seq once
    the evolution projection has it. The same `event_id` again is the same decision."""
    subject = subjects.evolution_subject(decision.agent_id)

    async def decide(last: int) -> Envelope[EvolutionDecided]:
        linked = decision.chained(await last_hash(eventlog, last), link_hash)
        return cause.caused(linked, aggregate_id=decision.agent_id, producer=PRODUCER, id=event_id)

    appended = await eventlog.append_decided(subject, decide)
    assert appended is not None
    await watcher.wait(appended.seq, EVOLUTION)
    return appended.seq
