"""Proposals on the sleep-time schedule (issue 14 point 2): each sleep-time turn of an
agent whose evolution is on also asks for a proposal drafted from its recent runs.

The turn (SleeptimeTurnCounted, on the agent's subject) is the schedule; the proposal
is a ProposeChange command with ids derived from the turn's run, so a turn seen twice
proposes once. The evolution command decides the rest: the minimum time between
proposals and the daily token budget refuse it before any model is asked, and the
mode says how far it goes by itself (evaluation, canary).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import asyncpg

from o_contracts import subjects
from o_contracts.events import SleeptimeTurnCounted
from o_contracts.evolution import EvolutionConfig
from o_contracts.evolution_commands import ProposeChange
from o_contracts.ids import derived_id
from o_runtime.eventlog import EventLog, Recorded

log = logging.getLogger(__name__)
PRODUCER = "evolution"


@dataclass
class ScheduledProposals:
    eventlog: EventLog
    pool: asyncpg.Pool
    # O_EVOLUTION_ENABLED: off server-wide, no agent proposes.
    enabled: bool

    async def on_turns_counted(self, records: list[Recorded]) -> None:
        if not self.enabled:
            return
        for rec in records:
            turn = rec.envelope.data
            assert isinstance(turn, SleeptimeTurnCounted)
            if turn.skipped or not turn.started:
                continue
            raw = await self.pool.fetchval(
                "SELECT config FROM evolution_config WHERE agent_id = $1", turn.agent_id
            )
            if raw is None or not EvolutionConfig.model_validate(raw).enabled:
                continue
            command = ProposeChange(
                agent_id=turn.agent_id,
                proposal_id=derived_id("proposal", turn.run_id, "sleeptime"),
                source="sleeptime",
            )
            envelope = rec.envelope.caused(
                command,
                aggregate_id=turn.agent_id,
                producer=PRODUCER,
                id=derived_id("cmd", turn.run_id, "sleeptime-proposal"),
            )
            await self.eventlog.send_command(
                subjects.evolution_command_subject(turn.agent_id), envelope
            )
            log.info("sleep-time turn of run %s asks for a proposal", turn.run_id)
