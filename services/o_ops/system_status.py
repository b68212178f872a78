"""What `o_ops status` and `GET /v1/operations/status` show: the whole system at a glance.

- services: every process that answers the roll call (o_runtime/roll_call.py), with its
  readiness checks; an expected service no process answered for is missing;
- consumers: every durable consumer O declares (o_setup/topology.py): messages not yet
  delivered (pending), delivered but not acknowledged (ack pending), redelivered, pull
  requests waiting (idle replicas), and the lag: how long the oldest message no replica
  has taken yet has waited;
- projections: where each stands in the log and how far behind it is, as an age (the
  oldest event on its subjects past its checkpoint: o_runtime/sampling.py);
- dead letters kept, per consumer.

`gather` reads them (NATS and Postgres); `problems` and `notes` judge them (no I/O).
Gathering needs what the gateway's role holds (o_setup/roles.py, `watches_the_system`):
no message body is read but the oldest waiting command's time.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError
from pydantic import BaseModel, Field

from o_contracts import subjects
from o_contracts.roll_call import Present
from o_runtime.env import Env
from o_runtime.roll_call import roll_call
from o_runtime.sampling import Followed, projection_states

# What `make run` starts, and what a deployment runs (o_devtools/supervisor.py).
SERVICES = ("gateway", "executor", "memory", "tool_sandbox", "evolution")
# A projection or consumer this far behind is a problem (readiness uses the same setting,
# O_READY_MAX_PROJECTION_LAG, and default).
MAX_LAG = 30.0


def expected_services(chosen: str | None, environ: Mapping[str, str]) -> list[str]:
    """The services expected to answer: those named, else O_SERVICES (what `make run`
    starts), else all five."""
    names = chosen or environ.get("O_SERVICES") or ",".join(SERVICES)
    return [s.strip().removeprefix("o_") for s in names.split(",") if s.strip()]


def max_lag(environ: Mapping[str, str]) -> float:
    return Env(environ).number("O_READY_MAX_PROJECTION_LAG", MAX_LAG, minimum=0.0)


class ConsumerState(BaseModel):
    stream: str
    name: str
    # The service whose replicas pull from it.
    service: str
    # False: the durable is not on the server (the setup role has not made it).
    present: bool = True
    pending: int = 0
    ack_pending: int = 0
    redelivered: int = 0
    # Pull requests waiting for a message: replicas with nothing to do.
    waiting: int = 0
    # Seconds the oldest message no replica has taken yet has waited (0: none waits).
    lag_seconds: float = 0.0


class ProjectionLag(BaseModel):
    name: str
    service: str
    # The log position it has applied up to (its checkpoint).
    position: int
    lag_seconds: float


class SystemStatus(BaseModel):
    at: datetime
    # The log's last sequence (O_EVENTS).
    log_last_seq: int
    expected: list[str]
    services: list[Present]
    consumers: list[ConsumerState]
    projections: list[ProjectionLag]
    # Dead letters kept in O_DEAD_LETTERS, by the consumer that gave up on them.
    dead_letters: dict[str, int] = Field(default_factory=dict)
    problems: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def missing(self) -> list[str]:
        answered = {p.service for p in self.services}
        return [s for s in self.expected if s not in answered]

    def body(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def problems(status: SystemStatus, max_lag: float = MAX_LAG) -> list[str]:
    """What stops the system from doing its work now (`o_ops status` exits 1 on any)."""
    out = [f"{s}: no process answered the roll call" for s in status.missing]
    for p in status.services:
        if not p.ready:
            failing = "; ".join(f"{k}: {v}" for k, v in p.checks.items() if v != "ok")
            out.append(f"{p.service} ({p.instance}) is not ready: {failing}")
    for c in status.consumers:
        if not c.present:
            out.append(
                f"durable consumer {c.name} on {c.stream} is missing (python -m o_setup apply)"
            )
        elif c.lag_seconds > max_lag:
            out.append(
                f"consumer {c.name} on {c.stream}: the oldest of {c.pending} waiting has waited"
                f" {c.lag_seconds:.0f}s"
            )
    for proj in status.projections:
        if proj.lag_seconds > max_lag:
            out.append(f"projection {proj.name} is {proj.lag_seconds:.0f}s behind the log")
    return out


def notes(status: SystemStatus) -> list[str]:
    """What deserves a look without stopping anything."""
    out = []
    kept = sum(status.dead_letters.values())
    if kept:
        by = ", ".join(f"{n} {c}" for c, n in sorted(status.dead_letters.items()))
        out.append(f"{kept} dead letter(s) kept ({by}): python -m o_ops dead-letters list")
    redelivered = [c for c in status.consumers if c.redelivered]
    for c in redelivered:
        out.append(f"consumer {c.name} on {c.stream}: {c.redelivered} message(s) redelivered")
    return out


def owner_of(module: str) -> str:
    """The service keeping a projection, from its module ("o_executor.projections:runs")."""
    package = module.split(".", 1)[0].removeprefix("o_")
    # (Schedules run inside the evolution service: docs/schedules.md.)
    return {"schedules": "evolution"}.get(package, package)


@functools.cache
def followed_projections() -> list[tuple[Followed, str]]:
    """Every projection O keeps (o_devtools/rebuild.py's registry), with its service."""
    from o_devtools.rebuild import PROJECTIONS, load

    return [
        (Followed(name, load(name).filter_subject), owner_of(module))
        for name, module in PROJECTIONS.items()
    ]


async def _consumers(nc: NATS) -> list[ConsumerState]:
    from o_setup.topology import durables

    js = nc.jetstream()
    out = []
    for d in durables():
        try:
            info = await js.consumer_info(d.stream, d.name)
        except NotFoundError:
            out.append(ConsumerState(stream=d.stream, name=d.name, service=d.owner, present=False))
            continue
        pending = int(info.num_pending or 0)
        lag = 0.0
        if pending:
            delivered = info.delivered.stream_seq if info.delivered else 0
            try:
                oldest = await js.get_msg(
                    d.stream, seq=delivered + 1, subject=d.filter_subject, next=True, direct=True
                )
            except NotFoundError:
                pass  # taken meanwhile
            else:
                if oldest.time is not None:
                    lag = max(0.0, (datetime.now(UTC) - oldest.time).total_seconds())
        out.append(
            ConsumerState(
                stream=d.stream,
                name=d.name,
                service=d.owner,
                pending=pending,
                ack_pending=int(info.num_ack_pending or 0),
                redelivered=int(info.num_redelivered or 0),
                waiting=int(info.num_waiting or 0),
                lag_seconds=round(lag, 3),
            )
        )
    return out


async def _projections(
    pool: asyncpg.Pool, nc: NATS, followed: Sequence[tuple[Followed, str]]
) -> list[ProjectionLag]:
    states = await projection_states(pool, nc.jetstream(), [f for f, _ in followed])
    owners = {f.name: owner for f, owner in followed}
    return [
        ProjectionLag(
            name=s.name, service=owners[s.name], position=s.position, lag_seconds=round(s.lag, 3)
        )
        for s in states
    ]


async def _dead_letters(nc: NATS) -> dict[str, int]:
    # The per-subject counts only (the gateway may read no dead letter: docs/security.md).
    info = await nc.jetstream().stream_info(
        subjects.DEAD_LETTER_STREAM, subjects_filter=subjects.ALL_DEAD_LETTERS
    )
    prefix = subjects.DEAD_LETTER_PREFIX + "."
    return {
        subject.removeprefix(prefix): int(count)
        for subject, count in sorted((info.state.subjects or {}).items())
    }


async def gather(
    nc: NATS,
    pool: asyncpg.Pool,
    *,
    expected: Sequence[str] = SERVICES,
    lag_limit: float = MAX_LAG,
    followed: Sequence[tuple[Followed, str]] | None = None,
) -> SystemStatus:
    """The system as NATS and Postgres tell it now (the roll call takes up to 2.5 s)."""
    followed = followed if followed is not None else followed_projections()
    present, consumers, projections, dead, log = await asyncio.gather(
        roll_call(nc, expected),
        _consumers(nc),
        _projections(pool, nc, followed),
        _dead_letters(nc),
        nc.jetstream().stream_info(subjects.EVENTS_STREAM),
    )
    status = SystemStatus(
        at=datetime.now(UTC),
        log_last_seq=int(log.state.last_seq or 0),
        expected=list(expected),
        services=present,
        consumers=consumers,
        projections=projections,
        dead_letters=dead,
    )
    status.problems = problems(status, lag_limit)
    status.notes = notes(status)
    return status
