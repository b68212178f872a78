"""Sleep-time turns carried out: when a manager's run ends, count it and start companions.

The decision (o_evolution/sleeptime.py) is made on the runs projection as the
log stands at the manager's subject, and appended there with that subject's
expected sequence: two ends racing are decided one after the other, never
both on the same counter. The companions' runs are then commands to the
executor, each with an id derived from its run id. A crash between the two is
healed by the event's redelivery: the turn is found recorded and its runs are
sent again (deduplicated by the commands stream, and exactly once in the
executor whatever the delay).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg

from o_contracts import subjects
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.events import RunCompleted, SleeptimeTurnCounted
from o_contracts.events.groups import CompanionRun
from o_contracts.ids import derived_id
from o_contracts.memory_stream import InvalidStreamSettings, StreamSettings
from o_contracts.models import ChatMessage
from o_contracts.projection_names import RUNS
from o_evolution.settings import SleeptimeBudget
from o_evolution.sleeptime import GroupState, Spent, companion_input, count_turn
from o_evolution.turn_state import last_turn
from o_runtime.eventlog import EventLog, Recorded
from o_runtime.reads import ProjectionReads

log = logging.getLogger(__name__)
PRODUCER = "evolution"

_LAST_MESSAGE = "SELECT id FROM messages WHERE run_id = $1 ORDER BY seq DESC LIMIT 1"
_SPENT = (
    "SELECT count(*) FILTER (WHERE created_at > now() - interval '1 hour') AS runs,"
    " coalesce(sum((usage->>'total_tokens')::bigint), 0) AS tokens"
    " FROM runs WHERE agent_id = ANY($1) AND created_at > now() - interval '1 day'"
)
# Whether the manager's archival memories not yet reflected on have passed its threshold
# (the memory service's passages; its own check is made again when it reflects).
_UNREFLECTED = (
    "SELECT a.metadata, (SELECT coalesce(sum(p.importance), 0) FROM passages p"
    "  WHERE p.agent_id = a.id AND p.kind = 'memory' AND NOT p.reflected) AS importance"
    " FROM agents a WHERE a.id = $1"
)
# The manager's messages a companion reads: after one message, up to another (both by
# their place in the log), leaving out compiled system prompts.
_TRANSCRIPT = (
    "SELECT body::text AS body FROM messages WHERE agent_id = $1 AND NOT compiled_system"
    " AND seq > coalesce((SELECT seq FROM messages WHERE id = $2), 0)"
    " AND seq <= (SELECT seq FROM messages WHERE id = $3) ORDER BY seq"
)


@dataclass
class SleeptimeTurns:
    eventlog: EventLog
    pool: asyncpg.Pool
    reads: ProjectionReads
    budget: SleeptimeBudget

    async def on_runs_completed(
        self, records: list[Recorded], groups: Mapping[str, asyncpg.Record]
    ) -> None:
        """The ends of runs, in log order: those of sleep-time managers (`groups`, the
        groups they manage: run_ends.py) count a turn."""
        for rec in records:
            group = groups.get(rec.envelope.data.agent_id)  # type: ignore[attr-defined]
            if group is not None:
                await self.on_run_completed(rec, group)

    async def on_run_completed(self, rec: Recorded, group: asyncpg.Record) -> None:
        ended = rec.envelope.data
        assert isinstance(ended, RunCompleted)
        subject = subjects.agent_subject(ended.agent_id)
        recorded: list[SleeptimeTurnCounted] = []

        async def decide(last: int) -> Envelope[SleeptimeTurnCounted] | None:
            # (The run may have ended in a conversation, further along the log.)
            async with self.reads.at(max(last, rec.seq), RUNS) as conn:
                row = await conn.fetchrow(
                    "SELECT * FROM sleeptime_turns WHERE run_id = $1", ended.run_id
                )
                if row is not None:
                    recorded.append(_turn_of(row))
                    return None
                turn = count_turn(
                    await _state(conn, group),
                    ended.agent_id,
                    ended.run_id,
                    await conn.fetchval(_LAST_MESSAGE, ended.run_id),
                    await _spent(conn, list(group["agent_ids"])),
                    self.budget,
                    reflection_due=await _reflection_due(conn, ended.agent_id),
                )
            recorded.append(turn)
            return rec.envelope.caused(
                turn,
                aggregate_id=ended.agent_id,
                producer=PRODUCER,
                id=derived_id("evt", ended.run_id, "sleeptime-turn"),
            )

        await self.eventlog.append_decided(subject, decide)
        turn = recorded[-1]
        if turn.skipped:
            log.info("sleep-time turn of run %s skipped: %s", turn.run_id, turn.skipped)
        for run in turn.started:
            await self._start(turn, run)

    async def _start(self, turn: SleeptimeTurnCounted, run: CompanionRun) -> None:
        if run.purpose == "reflection":
            command = StartRun(
                run_id=run.run_id,
                agent_id=run.agent_id,
                reflect_on=turn.agent_id,
                background=True,
                request_config=run.request_config(turn.run_id),
            )
        else:
            command = await self._review(turn, run)
        envelope = Envelope.wrap(
            command,
            aggregate_id=run.agent_id,
            producer=PRODUCER,
            id=derived_id("cmd", run.run_id, "start"),
            correlation_id=run.run_id,
        )
        await self.eventlog.send_command(subjects.Lane(run.agent_id).commands, envelope)

    async def _review(self, turn: SleeptimeTurnCounted, run: CompanionRun) -> StartRun:
        """A companion's review of the manager's messages since the last one it read."""
        rows = await self.pool.fetch(
            _TRANSCRIPT, turn.agent_id, turn.after_message_id, turn.last_processed_message_id
        )
        messages = [ChatMessage.model_validate_json(r["body"]) for r in rows]
        return StartRun(
            run_id=run.run_id,
            agent_id=run.agent_id,
            messages=[
                ChatMessage(
                    id=derived_id("message", run.run_id, "input", "0"),
                    role="user",
                    content=companion_input(messages),
                )
            ],
            background=True,
            request_config=run.request_config(turn.run_id),
        )


async def _state(conn: asyncpg.Connection, group: asyncpg.Record) -> GroupState:
    last = await last_turn(conn, group["id"])
    return GroupState(
        group_id=group["id"],
        companions=tuple(group["agent_ids"]),
        frequency=group["sleeptime_agent_frequency"],
        counter=last.counter if last is not None else -1,
        last_processed=last.last_processed if last is not None else None,
    )


async def _spent(conn: asyncpg.Connection, companions: list[str]) -> Spent:
    row = await conn.fetchrow(_SPENT, companions)
    return Spent(runs_last_hour=row["runs"], tokens_last_day=row["tokens"])


async def _reflection_due(conn: asyncpg.Connection, agent_id: str) -> bool:
    row = await conn.fetchrow(_UNREFLECTED, agent_id)
    if row is None or not row["importance"]:
        return False
    try:
        threshold = StreamSettings.from_metadata(row["metadata"]).reflection_threshold
    except InvalidStreamSettings:
        return False  # (refused when set; an old value is the memory service's to report)
    return bool(row["importance"] >= threshold)


def _turn_of(row: asyncpg.Record) -> SleeptimeTurnCounted:
    return SleeptimeTurnCounted(
        group_id=row["group_id"],
        agent_id=row["agent_id"],
        run_id=row["run_id"],
        turns_counter=row["turns_counter"],
        started=[CompanionRun.model_validate(r) for r in row["started"]],
        after_message_id=row["after_message_id"],
        last_processed_message_id=row["last_processed_message_id"],
        skipped=row["skipped"],
    )
