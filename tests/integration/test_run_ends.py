"""Which ended runs concern the evolution service, asked of Postgres once per batch
(o_evolution/run_ends.py): the sleep-time group an agent manages (its first, and only of
that kind) and whether a canary of it runs. Real Postgres."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg

from o_contracts.ids import new_id
from o_evolution.run_ends import concerned

T0 = datetime(2026, 12, 1, tzinfo=UTC)


async def a_group(
    pool: asyncpg.Pool, manager: str, kind: str, frequency: int, created: datetime
) -> str:
    group_id = new_id("group")
    await pool.execute(
        "INSERT INTO groups (id, manager_type, agent_ids, manager_agent_id,"
        " sleeptime_agent_frequency, created_at, updated_at, last_seq)"
        " VALUES ($1, $2, $3, $4, $5, $6, $6, 1)",
        group_id,
        kind,
        [manager, new_id("agent")],
        manager,
        frequency,
        created,
    )
    return group_id


async def a_canary(pool: asyncpg.Pool, agent_id: str, status: str) -> None:
    await pool.execute(
        "INSERT INTO evolution_rollouts (rollout_id, agent_id, proposal_id, version_id, spec,"
        " stable_version, weight, steps, status, started_at, updated_at)"
        " VALUES ($1, $2, 'proposal-1', 'version-1', $3, 'version-0', 10, '{10,50,100}', $4,"
        " $5, $5)",
        new_id("rollout"),
        agent_id,
        {},
        status,
        T0,
    )


async def test_a_batch_says_which_agents_manage_a_sleeptime_group_and_which_run_a_canary(
    pool: asyncpg.Pool,
) -> None:
    manager, plain, canaried, both, stopped = (new_id("agent") for _ in range(5))
    first = await a_group(pool, manager, "sleeptime", 3, T0)
    await a_group(pool, manager, "sleeptime", 5, T0 + timedelta(minutes=1))
    await a_group(pool, plain, "round_robin", 1, T0)
    await a_canary(pool, canaried, "running")
    both_group = await a_group(pool, both, "sleeptime", 2, T0)
    await a_canary(pool, both, "running")
    await a_canary(pool, stopped, "aborted")

    found = await concerned(pool, [manager, plain, canaried, both, stopped, new_id("agent")])

    assert {agent: g["id"] for agent, g in found.groups.items()} == {
        manager: first,
        both: both_group,
    }
    assert found.groups[manager]["sleeptime_agent_frequency"] == 3
    assert found.groups[manager]["manager_agent_id"] == manager
    assert found.canaries == {canaried, both}


async def test_a_batch_of_agents_that_concern_neither_finds_nothing(pool: asyncpg.Pool) -> None:
    found = await concerned(pool, [new_id("agent"), new_id("agent")])

    assert not found.groups
    assert not found.canaries
