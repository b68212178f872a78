"""`python -m o_ops projections verify`: every projection rebuilt into a scratch schema and
compared with the live tables. On the running system it finds nothing; a row changed and a
row deleted by hand are found, named by table and key, until a rebuild mends them."""

from __future__ import annotations

import json

import asyncpg
import pytest

from o_devtools.rebuild import PROJECTIONS
from tests.e2e.conftest import System
from tests.e2e.ops_support import o_ops
from tests.e2e.support import new_agent

pytestmark = pytest.mark.e2e


async def test_verify_finds_no_difference_on_the_running_system(system: System) -> None:
    await new_agent(system)
    ran = await o_ops(system.env, "projections", "verify", "--json")
    assert ran.code == 0, ran.out + ran.err
    results = json.loads(ran.out)
    assert [r["projection"] for r in results] == list(PROJECTIONS)
    assert all(r["differences"] == {} for r in results)
    agents = next(r for r in results if r["projection"] == "agents")
    assert agents["replayed"] > 0


async def test_verify_names_rows_changed_or_deleted_by_hand_until_a_rebuild(
    system: System,
) -> None:
    agent = await new_agent(system)
    inserted = await system.http.post(
        f"/v1/agents/{agent['id']}/archival-memory", json={"text": "verify keeps me"}
    )
    assert inserted.status_code == 200, inserted.text
    (passage,) = inserted.json()
    human = next(b for b in agent["memory"]["blocks"] if b["label"] == "human")
    db = await asyncpg.connect(system.env["DATABASE_URL"])
    try:
        await db.execute("UPDATE blocks SET value = 'Name: Eve' WHERE id = $1", human["id"])
        await db.execute("DELETE FROM passages WHERE id = $1", passage["id"])
    finally:
        await db.close()

    ran = await o_ops(system.env, "projections", "verify", "memory", "archival")
    assert ran.code == 1, ran.out + ran.err
    lines = ran.out.splitlines()
    assert (
        f'  blocks (id={human["id"]}): value: live "Name: Eve" but the log gives "Name: Sam"'
        in lines
    )
    assert f"  passages (id={passage['id']}): made by the log, missing from the live table" in lines
    as_json = json.loads((await o_ops(system.env, "projections", "verify", "memory", "--json")).out)
    (memory,) = as_json
    assert memory["differences"]["blocks"] == [
        {
            "kind": "changed",
            "key": {"id": human["id"]},
            "columns": {"value": {"live": "Name: Eve", "log": "Name: Sam"}},
        }
    ]

    rebuilt = await o_ops(system.env, "projections", "rebuild", "memory", "archival")
    assert rebuilt.code == 0, rebuilt.err
    again = await o_ops(system.env, "projections", "verify", "memory", "archival")
    assert again.code == 0, again.out
    assert again.out.splitlines()[0].endswith(": same as the log")
    block = await system.http.get(f"/v1/blocks/{human['id']}")
    assert block.json()["value"] == "Name: Sam"


async def test_an_unknown_projection_is_a_usage_error(system: System) -> None:
    ran = await o_ops(system.env, "projections", "verify", "nonesuch")
    assert ran.code == 2
    assert "unknown projection(s): nonesuch" in ran.err
