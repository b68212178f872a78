"""What request handlers share: the log, the read models, and read-your-writes waits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

import asyncpg
from fastapi import Depends, HTTPException, Request

from o_contracts.ids import IdPrefix, InvalidId, parse_id
from o_gateway.read_fence import ReadFence
from o_gateway.seen_agents import SeenAgents
from o_gateway.settings import GatewaySettings
from o_runtime.eventlog import EventLog
from o_runtime.readiness import Readiness
from o_runtime.reads import ProjectionReads
from o_runtime.waiting import ProjectionWatcher

# How long a write waits for its effect to be visible in the read models.
READ_YOUR_WRITES_TIMEOUT = 10.0


class Operated(Protocol):
    """The process behind the gateway, as its operators' endpoints see it (o_runtime/service.py)."""

    async def readiness(self) -> Readiness: ...

    async def metrics_text(self) -> bytes | None: ...


@dataclass
class Gateway:
    eventlog: EventLog
    pool: asyncpg.Pool
    watcher: ProjectionWatcher
    settings: GatewaySettings = field(default_factory=GatewaySettings)
    # Readiness and metrics (routes/operations.py); None outside a running service.
    operated: Operated | None = None
    # What lets the hot reads keep their answers exactly (hot_reads.py); None: they don't.
    fence: ReadFence | None = None
    # Told to stop: requests still going when uvicorn gives up on them answer 503
    # (stopping.py).
    stopping: bool = False
    # Agents a message may go to before the agent is read (seen_agents.py).
    seen_agents: SeenAgents = field(default_factory=SeenAgents)

    @property
    def reads(self) -> ProjectionReads:
        return ProjectionReads(self.pool, self.watcher)

    async def visible(self, seq: int | None, *projections: str, applies: bool = False) -> None:
        """Wait until the projections show `seq` (`applies`: they apply that event
        themselves; o_runtime/waiting.py)."""
        if seq:
            await self.watcher.wait(
                seq, *projections, timeout=READ_YOUR_WRITES_TIMEOUT, applies=applies
            )

    async def agent_row(self, agent_id: str) -> dict[str, Any]:
        row = await self.pool.fetchrow("SELECT * FROM agents WHERE id = $1", agent_id)
        if row is None:
            raise HTTPException(404, f"Agent {agent_id} not found")
        return dict(row)


async def gateway(request: Request) -> Gateway:
    # async: FastAPI runs a plain-def dependency in a worker thread, a thread
    # hop on every request.
    gw: Gateway = request.app.state.gateway
    return gw


# The gateway's state, as a route parameter: `gw: GW`.
GW = Annotated[Gateway, Depends(gateway)]


def checked_id(value: str, prefix: IdPrefix) -> str:
    try:
        return parse_id(value, prefix)
    except InvalidId as exc:
        raise HTTPException(422, str(exc)) from exc
