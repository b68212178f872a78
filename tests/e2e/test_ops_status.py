"""`python -m o_ops status` and `GET /v1/operations/status` against the running system: every
service process answers the roll call, every durable consumer and projection is there, and
the route serves what the CLI prints, behind the API key."""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest

from o_devtools.rebuild import PROJECTIONS
from o_setup.topology import durables
from tests.e2e.conftest import EXECUTOR_REPLICAS, SERVICES, System
from tests.e2e.ops_support import o_ops
from tests.e2e.support import new_agent

pytestmark = pytest.mark.e2e


async def test_status_shows_every_service_process_ready_every_consumer_and_projection(
    system: System,
) -> None:
    agent = await new_agent(system)
    ran = await o_ops(system.env, "status", "--json")
    assert ran.code == 0, ran.out + ran.err
    status = json.loads(ran.out)
    assert Counter(p["service"] for p in status["services"]) == {
        **{s: 1 for s in SERVICES},
        "executor": EXECUTOR_REPLICAS,
    }
    assert all(p["ready"] for p in status["services"]), status["services"]
    assert all(set(p["checks"].values()) == {"ok"} for p in status["services"])
    assert {(c["stream"], c["name"], c["service"]) for c in status["consumers"]} == {
        (d.stream, d.name, d.owner) for d in durables()
    }
    assert all(c["present"] for c in status["consumers"])
    assert {p["name"] for p in status["projections"]} == set(PROJECTIONS)
    assert status["problems"] == []
    # The agent made is in the log, and the agents projection has applied it.
    created = await system.http.get(f"/v1/agents/{agent['id']}")
    assert created.status_code == 200
    agents = next(p for p in status["projections"] if p["name"] == "agents")
    assert 0 < agents["position"] <= status["log_last_seq"]


async def test_status_prints_tables_for_people(system: System) -> None:
    ran = await o_ops(system.env, "status")
    assert ran.code == 0, ran.out + ran.err
    lines = ran.out.splitlines()
    for heading in ("Services", "Consumers", "Projections", "Dead letters", "No problems."):
        assert heading in lines
    # (Other sections name services too: the dead letters are counted by service, and
    # earlier tests in this system leave some.)
    services = lines[lines.index("Services") : lines.index("Consumers")]
    executors = [line for line in services if line.startswith("executor ")]
    assert len(executors) == EXECUTOR_REPLICAS
    assert all(" yes " in line for line in executors)


async def test_the_status_route_needs_the_api_key_and_answers_what_the_cli_prints(
    system: System,
) -> None:
    async with httpx.AsyncClient(base_url=system.base_url, timeout=30) as anonymous:
        refused = await anonymous.get("/v1/operations/status")
    assert refused.status_code == 401
    answered = await system.http.get("/v1/operations/status")
    assert answered.status_code == 200, answered.text
    by_route = answered.json()
    by_cli = json.loads((await o_ops(system.env, "status", "--json")).out)
    assert set(by_route) == set(by_cli)
    assert sorted((p["service"], p["instance"]) for p in by_route["services"]) == sorted(
        (p["service"], p["instance"]) for p in by_cli["services"]
    )
    assert [(c["stream"], c["name"]) for c in by_route["consumers"]] == [
        (c["stream"], c["name"]) for c in by_cli["consumers"]
    ]
    assert [p["name"] for p in by_route["projections"]] == [
        p["name"] for p in by_cli["projections"]
    ]
