"""Evolution decisions kept in the agent's archival memory, tagged `evolution`.

An event reactor in the memory service follows every agent's evolution subject
(`o.evt.evolution.*`). Each decision but the per-case CaseEvaluated becomes one
passage, written by evolution_notes.py and inserted through the same path as an API
insert (ArchivalCommands.insert), with the decision as its cause: the passage's id and
its event's id derive from the decision's id, and the archive records which decision
made it, so a decision delivered again inserts nothing, however late.

A decision names its proposal only by id; what was proposed, by whom, is read from
the evolution service's projection as of the decision (it has applied every earlier
decision then). An agent deleted meanwhile is skipped. The reactor reacts to decisions
appended from its first start on (reactor.py): older history is not archived.
"""

from __future__ import annotations

import logging
from typing import Any

import asyncpg

from o_contracts.commands import InsertPassage
from o_contracts.events import VersionRolledBack
from o_contracts.events.evolution import EvolutionDecided
from o_contracts.evolution import Patch
from o_contracts.ids import derived_id
from o_contracts.projection_names import EVOLUTION
from o_contracts.registry import all_messages
from o_memory.archival_handlers import ArchivalCommands
from o_memory.evolution_notes import NOT_ARCHIVED, TAG, Context, Proposal, note_for
from o_runtime.eventlog import AppendRejected, Recorded
from o_runtime.service import Service

log = logging.getLogger(__name__)

_AGENT = "SELECT 1 FROM agents WHERE id = $1"
_PROPOSAL = "SELECT id, source, patch FROM evolution_proposals WHERE id = $1 AND agent_id = $2"
# The proposal whose promotion made a version (the latest, if several made the same one).
_MADE = (
    "SELECT id, source, patch FROM evolution_proposals"
    " WHERE agent_id = $1 AND candidate_version = $2 AND status = 'promoted'"
    " ORDER BY updated_at DESC LIMIT 1"
)


def archived_types() -> list[type[EvolutionDecided]]:
    """Every decision type kept in archival memory (a type added later is, by default)."""
    return [
        m
        for m in all_messages()
        if issubclass(m, EvolutionDecided) and m.type_name() not in NOT_ARCHIVED
    ]


def passage_id_of(decision_id: str) -> str:
    return derived_id("passage", decision_id, TAG)


def _proposal(row: asyncpg.Record | None) -> Proposal | None:
    if row is None:
        return None
    patch: Any = row["patch"]
    return Proposal(
        row["id"], row["source"], Patch.model_validate(patch) if patch is not None else None
    )


class EvolutionArchive:
    def __init__(self, service: Service, archival: ArchivalCommands) -> None:
        self.s = service
        self.archival = archival

    async def on_decisions(self, records: list[Recorded]) -> None:
        for rec in records:
            await self.archive(rec)

    async def archive(self, rec: Recorded) -> None:
        decision = rec.envelope.data
        assert isinstance(decision, EvolutionDecided)
        if await self.s.pool.fetchval(_AGENT, decision.agent_id) is None:
            log.info(
                "evolution decision %s of deleted agent %s", rec.envelope.id, decision.agent_id
            )
            return
        note = note_for(decision, await self._context(rec, decision))
        if note is None:
            return
        insert = InsertPassage(
            agent_id=decision.agent_id,
            passage_id=passage_id_of(rec.envelope.id),
            text=note.text,
            tags=[TAG],
            created_at=rec.envelope.time,
            importance=note.importance,
        )
        try:
            await self.archival.insert(rec.envelope, insert, own=True)
        except AppendRejected as exc:
            # The agent was deleted since the check (404), or its passage was inserted
            # and deleted since (409): nothing to keep.
            if exc.status not in (404, 409):
                raise
            log.info("evolution decision %s not archived: %s", rec.envelope.id, exc.reason)

    async def _context(self, rec: Recorded, decision: EvolutionDecided) -> Context:
        proposal_id = getattr(decision, "proposal_id", None)
        rollback = isinstance(decision, VersionRolledBack)
        if not isinstance(proposal_id, str) and not rollback:
            return Context()
        async with self.s.reads.at(rec.seq, EVOLUTION) as conn:
            proposal = (
                _proposal(await conn.fetchrow(_PROPOSAL, proposal_id, decision.agent_id))
                if isinstance(proposal_id, str)
                else None
            )
            undone = (
                _proposal(await conn.fetchrow(_MADE, decision.agent_id, decision.previous_version))
                if isinstance(decision, VersionRolledBack)
                else None
            )
        return Context(proposal, undone)
