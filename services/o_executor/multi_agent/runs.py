"""Another agent's run, started by a multi-agent tool: accepted on that agent's lane
(`RunQueued`, then `StartRun`) and followed to its end in the log.

Everything here can be done again by a resumed caller with the same outcome: the run's
id, its events' and its command's ids derive from the calling run, the tool call and
the other agent, so a second try finds the run the first one started (queued, going or
finished) and the other agent runs once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
from nats.aio.msg import Msg

from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope, known_type
from o_contracts.events import RunCompleted, RunQueued
from o_contracts.ids import derived_id
from o_contracts.models import ChatMessage
from o_contracts.projection_names import RUNS
from o_contracts.subjects import Lane
from o_runtime.eventlog import AppendRejected, EventLog
from o_runtime.log_news import look_until
from o_runtime.reads import ProjectionReads
from o_runtime.waiting import ProjectionLag

PRODUCER = "executor"
# At most this many agents are sent one tag broadcast (Letta lists 100).
MAX_TAGGED = 100

_AGENT = "SELECT id, agent_type FROM agents WHERE id = $1"
# Letta's match: every tag of match_all (none given: any agent) and one of match_some
# (none given: no further condition); never the sender.
_TAGGED = (
    "SELECT id, agent_type FROM agents WHERE id <> $1"
    " AND (cardinality($2::text[]) = 0 OR tags @> $2::text[])"
    " AND (cardinality($3::text[]) = 0 OR tags && $3::text[])"
    f" ORDER BY created_at, id LIMIT {MAX_TAGGED}"
)
_KNOWN = "SELECT 1 AS known FROM runs WHERE id = $1"
_AWAITS_APPROVAL = (
    "SELECT 1 FROM pending_approvals WHERE agent_id = $1 AND conversation_id IS NULL LIMIT 1"
)
_END = "SELECT status, stop_reason, error, last_seq FROM runs WHERE id = $1"
_REPLIES = (
    "SELECT body::text AS body FROM messages WHERE run_id = $1 AND role = 'assistant' ORDER BY seq"
)


@dataclass(frozen=True)
class OtherAgent:
    id: str
    agent_type: str


@dataclass(frozen=True)
class RunEnd:
    """Where and how the other agent's run ended."""

    seq: int
    status: str
    stop_reason: str
    error: str | None

    @property
    def failed(self) -> bool:
        return self.status != "completed"


class OtherRuns:
    """Runs of other agents that one run's tool calls start (`caller`: its StartRun)."""

    def __init__(
        self,
        eventlog: EventLog,
        pool: asyncpg.Pool,
        reads: ProjectionReads,
        caller: Envelope[StartRun],
    ) -> None:
        self.eventlog = eventlog
        self.pool = pool
        self.reads = reads
        self.caller = caller

    def run_id(self, tool_call_id: str, agent_id: str) -> str:
        return derived_id("run", self.caller.data.run_id, tool_call_id, agent_id)

    async def agent(self, agent_id: str) -> OtherAgent | None:
        row = await self.pool.fetchrow(_AGENT, agent_id)
        return OtherAgent(row["id"], row["agent_type"]) if row is not None else None

    async def tagged(self, match_all: list[str], match_some: list[str]) -> list[OtherAgent]:
        rows = await self.pool.fetch(_TAGGED, self.caller.data.agent_id, match_all, match_some)
        return [OtherAgent(r["id"], r["agent_type"]) for r in rows]

    async def start(
        self,
        agent: OtherAgent,
        run_id: str,
        text: str,
        *,
        awaited_by: list[str],
        background: bool = False,
    ) -> None:
        """Accept a run of `agent` on `text` (a system message, as Letta sends it).

        RunQueued first, as the gateway does for a run it accepts: the run exists (it is
        listed, it can be cancelled) before the other agent's turn comes, and it ends
        recorded (cancelled) even if that agent is deleted first, so nobody waits for an
        end that never comes. Raises AppendRejected (the agent waits for an approval, or the
        message is too large for the log).
        """
        lane = Lane(agent.id)
        command = self.caller.caused(
            StartRun(
                run_id=run_id,
                agent_id=agent.id,
                messages=[
                    ChatMessage(
                        id=derived_id("message", run_id, "input", "0"), role="system", content=text
                    )
                ],
                background=background,
                awaited_by=awaited_by,
            ),
            aggregate_id=agent.id,
            producer=PRODUCER,
            id=derived_id("cmd", run_id, "start"),
        )
        queued = self.caller.caused(
            RunQueued(run_id=run_id, agent_id=agent.id, background=background),
            aggregate_id=agent.id,
            producer=PRODUCER,
            id=derived_id("evt", run_id, "queued"),
        )

        async def decide(last: int) -> Envelope[Any] | None:
            # Queued once: a resumed caller finds the run, whatever became of it since.
            async with self.reads.row_at(last, RUNS, _KNOWN, run_id) as (conn, row):
                if row is not None:
                    return None
                if await conn.fetchval(_AWAITS_APPROVAL, agent.id):
                    # As Letta refuses a message to it (409): its pending tool call would
                    # be left without a result.
                    raise AppendRejected(
                        f"agent {agent.id} is waiting for approval on a tool call; it takes no"
                        " new message until the pending request is approved or denied",
                        status=409,
                    )
                return queued

        await self.eventlog.append_decided(lane.events, decide)
        # Sent again by a resumed caller: within the stream's dedup window this is the
        # same message; after it, the executor answers a finished run from the log.
        await self.eventlog.send_command(lane.commands, command)

    async def ended(self, agent_id: str, run_id: str, timeout: float) -> RunEnd | None:
        """The run's end once it has one; None if it has none within `timeout` seconds."""
        lane = Lane(agent_id)

        def heard(msg: Msg) -> bool:
            return known_type(msg.data) == RunCompleted.type_name()

        return await look_until(
            self.eventlog.nc, lane.events, heard, lambda: self._end(lane, run_id), timeout
        )

    async def _end(self, lane: Lane, run_id: str) -> RunEnd | None:
        last = await self.eventlog.last_seq(lane.events)
        try:
            async with self.reads.row_at(last, RUNS, _END, run_id) as (_, row):
                if row is None or row["stop_reason"] is None:
                    return None
                return RunEnd(row["last_seq"], row["status"], row["stop_reason"], row["error"])
        except ProjectionLag:
            return None  # (looked at again at the next news or recheck)

    async def replies(self, run_id: str, seq: int) -> list[ChatMessage]:
        """The run's assistant messages, once the run's end at `seq` is projected."""
        async with self.reads.at(seq, RUNS) as conn:
            rows = await conn.fetch(_REPLIES, run_id)
        return [ChatMessage.model_validate_json(r["body"]) for r in rows]
