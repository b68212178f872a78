"""Whether a service is ready for work, and if not, why: what Kubernetes' readiness probe asks.

Liveness is only "the process answers" (health.py): nothing outside it, a NATS or
Postgres outage, should get it restarted, since a restart cures neither. Readiness
says whether it can do its work now:

- NATS connected (every service: the log is how work arrives and is recorded);
- Postgres answering (every service but the tool sandbox, which has no database);
- each projection the service keeps within `O_READY_MAX_PROJECTION_LAG` seconds of the
  log (the age of its oldest unapplied event: sampling.py), since what it would answer
  or decide on is that old;
- whatever the service adds (the memory service: its embedding model loaded).

`decide` is the rule; `check_readiness` gathers the facts for a running service.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from o_runtime.sampling import SAMPLE_TIMEOUT, Followed, ProjectionState, projection_states

if TYPE_CHECKING:
    from o_runtime.service import Service

OK = "ok"


@dataclass(frozen=True)
class Readiness:
    ready: bool
    # Each check by name: "ok", or why not.
    checks: dict[str, str]

    def body(self) -> dict[str, object]:
        return {"status": "ready" if self.ready else "not ready", "checks": self.checks}


def decide(
    *,
    nats: bool,
    postgres: bool | None,
    projections: Sequence[ProjectionState] | None,
    max_lag: float,
    others: Mapping[str, str | None] | None = None,
) -> Readiness:
    """`postgres` None: the service has no database; `projections` None: their state is
    unknown (Postgres did not answer); `others`: a service's own checks (None: fine)."""
    checks = {"nats": OK if nats else "not connected"}
    if postgres is not None:
        checks["postgres"] = OK if postgres else "unreachable"
    for state in projections or ():
        checks[f"projection {state.name}"] = (
            OK
            if state.lag <= max_lag
            else f"{state.lag:.1f}s behind the log (O_READY_MAX_PROJECTION_LAG={max_lag:g})"
        )
    for name, problem in (others or {}).items():
        checks[name] = problem or OK
    return Readiness(all(v == OK for v in checks.values()), checks)


async def _postgres_answers(service: Service) -> bool:
    try:
        async with asyncio.timeout(SAMPLE_TIMEOUT):
            await service.pool.fetchval("SELECT 1")
    except Exception:
        return False
    return True


async def check_readiness(service: Service) -> Readiness:
    nats = service.eventlog.nc.is_connected
    postgres: bool | None = None
    states: list[ProjectionState] | None = None
    others = dict(service.readiness_checks())
    if service.needs_database:
        postgres = await _postgres_answers(service)
        if postgres and nats:
            followed = [Followed(p.name, p.projection.filter_subject) for p in service.projectors]
            try:
                async with asyncio.timeout(SAMPLE_TIMEOUT):
                    states = await projection_states(service.pool, service.eventlog.js, followed)
            except Exception as exc:
                others["projections"] = f"their lag could not be read: {exc!r}"
    return decide(
        nats=nats,
        postgres=postgres,
        projections=states,
        max_lag=service.settings.telemetry.ready_max_projection_lag,
        others=others,
    )
