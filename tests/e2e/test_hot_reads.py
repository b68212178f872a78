"""The hot reads' kept answers (GET agent, list messages, get run) never hide a change:
a write the API acknowledged is in the very next read, on this gateway or another replica,
and so is a change no request made (a memory tool editing a block during a run)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from o_contracts import subjects
from o_contracts.projection_names import MEMORY, RUNS
from tests.e2e.conftest import System
from tests.e2e.support import (
    agent_events,
    another_gateway,
    new_agent,
    projected,
    send,
    subject_events,
    until,
)
from tests.fakes.openai_server import FakeOpenAI, Reply

ROUNDS = 25


@dataclass
class Replica:
    """A second gateway process on a port of its own, on the same NATS and Postgres."""

    http: httpx.AsyncClient


@pytest.fixture(scope="module")
async def replica(system: System, servers) -> AsyncIterator[Replica]:  # type: ignore[no-untyped-def]
    async with another_gateway(system, servers.seed_file) as (http, _):
        yield Replica(http)


async def renamed_and_read(
    writer: httpx.AsyncClient, reader: httpx.AsyncClient, agent_id: str, rounds: int
) -> list[tuple[str, str, str]]:
    """Each round: read the agent (its answer kept), change its description and a block,
    read it again at once; (description, block value, expected) of every read after."""
    seen = []
    for i in range(rounds):
        assert (await reader.get(f"/v1/agents/{agent_id}")).status_code == 200
        changed = await writer.patch(f"/v1/agents/{agent_id}", json={"description": f"round {i}"})
        assert changed.status_code == 200, changed.text
        block = await writer.patch(
            f"/v1/agents/{agent_id}/core-memory/blocks/human", json={"value": f"Name: Sam {i}"}
        )
        assert block.status_code == 200, block.text
        agent = (await reader.get(f"/v1/agents/{agent_id}")).json()
        human = next(b["value"] for b in agent["blocks"] if b["label"] == "human")
        seen.append((agent["description"], human, f"{i}"))
    return seen


async def test_every_acknowledged_change_is_in_the_next_get_agent(system: System) -> None:
    agent = await new_agent(system)
    seen = await renamed_and_read(system.http, system.http, agent["id"], ROUNDS)
    assert seen == [(f"round {i}", f"Name: Sam {i}", f"{i}") for i in range(ROUNDS)]


async def test_a_change_acknowledged_by_another_replica_is_in_the_next_read(
    system: System, replica: Replica
) -> None:
    agent = await new_agent(system)
    # Written through the replica, read through the first gateway; then the other way.
    there = await renamed_and_read(replica.http, system.http, agent["id"], ROUNDS)
    back = await renamed_and_read(system.http, replica.http, agent["id"], ROUNDS)
    expected = [(f"round {i}", f"Name: Sam {i}", f"{i}") for i in range(ROUNDS)]
    assert there == expected
    assert back == expected


async def test_a_new_message_and_its_run_are_in_the_next_reads_on_either_replica(
    system: System, replica: Replica, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    url = f"/v1/agents/{agent['id']}/messages"
    for i in range(5):
        for reader in (system.http, replica.http):
            assert (await reader.get(url)).status_code == 200
        llm.push(Reply(content=f"answer {i}"))
        reply = await send(system, agent["id"], f"question {i}")
        run_id = reply["messages"][-1]["run_id"]
        for reader in (system.http, replica.http):
            texts = [
                m["content"]
                for m in (await reader.get(url)).json()
                if m["message_type"] in ("user_message", "assistant_message")
            ]
            assert texts[-2:] == [f"question {i}", f"answer {i}"]
            run = (await reader.get(f"/v1/runs/{run_id}")).json()
            assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")


async def test_a_block_a_memory_tool_edits_during_a_run_is_in_the_next_get_agent(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    human = next(b for b in agent["blocks"] if b["label"] == "human")
    held = threading.Event()
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})]),
        Reply(content="Noted.", release=held),
    )
    path = f"/v1/agents/{agent['id']}"
    try:
        async with agent_events(system, agent["id"]) as events:
            assert (await system.http.get(path)).json()["blocks"] == agent["blocks"]
            run = (await system.http.post(f"{path}/messages/async", json={"input": "tea"})).json()
            # The tool has run (its result is in the second request, which is held) ...
            await until(llm, lambda reqs: len(reqs) == 2)
            async with subject_events(system, subjects.block_subject(human["id"])) as block:
                updated = await block.wait_until(lambda e: e.type == "BlockUpdated")
            # ... and once the memory projection has committed its edit, the next read
            # shows it, while the run still waits on its model.
            await projected(system, block.last_seq, MEMORY)
            during = (await system.http.get(path)).json()
            values = {b["label"]: b["value"] for b in during["blocks"]}
            assert values["human"] == "Name: Sam\nLikes: tea"
            assert updated.aggregate_id == human["id"]
            assert (await system.http.get(f"/v1/runs/{run['id']}")).json()["status"] == "running"
            held.set()
            await events.wait_for("RunCompleted")
            await projected(system, events.last_seq, RUNS)
    finally:
        held.set()
    after = (await system.http.get(f"/v1/runs/{run['id']}")).json()
    assert (after["status"], after["stop_reason"]) == ("completed", "end_turn")
    last = (await system.http.get(f"{path}/messages")).json()[-1]
    assert (last["message_type"], last["content"]) == ("assistant_message", "Noted.")
