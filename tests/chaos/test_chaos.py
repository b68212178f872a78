"""The chaos suite's short form (`make chaos` is the long one): a minute of load on a whole O
system while its services, nats-server, the Postgres postmaster and a Postgres backend are
SIGKILLed; every acknowledged request exactly once, no run left active, block versions
consistent, a full projection rebuild changing nothing the API shows.

`CHAOS_SEED` picks another load and kill schedule (the default one kills, in order, a Postgres
backend, the memory service, the gateway, the postmaster, the executor and nats-server, as far
as a minute goes: each kill waits for the system to serve again after the previous one).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from chaos.harness import Params, run
from chaos.report import render

pytestmark = [pytest.mark.chaos, pytest.mark.e2e]

SHORT = Params(
    seed=int(os.environ.get("CHAOS_SEED", "39")),
    duration=60.0,
    agents=6,
    clients=8,
    kill_interval=2.0,
    targets=["gateway", "executor", "memory", "nats", "postgres", "pg-backend"],
    request_timeout=40.0,
    retry_grace=30.0,
    recovery_timeout=45.0,
    quiet_timeout=45.0,
)


async def test_every_acknowledged_request_exactly_once_under_kills(tmp_path: Path) -> None:
    params = replace(SHORT, base=tmp_path / "o", json_path=tmp_path / "chaos.json")
    report = await run(params)
    text = render(report)
    print(text)
    assert report.verdicts is not None, text
    assert report.failures == dict.fromkeys(report.failures, 0), text
