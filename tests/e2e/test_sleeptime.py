"""Sleep-time agents (issue 13): a companion that shares the primary's memory and runs
in the background on a schedule the evolution service keeps.

Through the official SDK and HTTP against the five processes, with the scripted LLM
(it answers a companion's review with plain text, which ends the companion's turn).
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest

from o_contracts import subjects
from o_contracts.commands import RunMemoryTool
from o_contracts.envelope import Envelope
from o_contracts.ids import new_id
from o_evolution.run_ends import concerned
from o_evolution.settings import SleeptimeBudget
from o_evolution.turns import SleeptimeTurns
from o_runtime.commands import send_and_wait
from o_runtime.db import connect_pool
from o_runtime.eventlog import EventLog, Recorded
from o_runtime.reads import ProjectionReads
from o_runtime.waiting import ProjectionWatcher
from tests.e2e.conftest import System
from tests.e2e.support import agent_events, new_agent, projected, send
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply

pytestmark = pytest.mark.e2e
DEADLINE = 30.0
REMINDER = "<system-reminder>"


async def sleeptime_agent(system: System, name: str, frequency: int | None = None) -> Any:
    client = system.client()
    agent = await asyncio.to_thread(
        client.agents.create,
        name=name,
        model="openai/gpt-4o-mini",
        memory_blocks=[
            {"label": "persona", "value": "A personal assistant."},
            {"label": "human", "value": "Favourite colour: lavender"},
        ],
        enable_sleeptime=True,
    )
    assert agent.multi_agent_group is not None
    if frequency is not None:
        patched = await system.http.patch(
            f"/v1/groups/{agent.multi_agent_group.id}",
            json={
                "manager_config": {
                    "manager_type": "sleeptime",
                    "sleeptime_agent_frequency": frequency,
                }
            },
        )
        assert patched.status_code == 200, patched.text
        assert patched.json()["sleeptime_agent_frequency"] == frequency
    return agent


async def settled(system: System, run_ids: list[str]) -> list[dict[str, Any]]:
    """The runs once each has ended (a bounded wait on their status, as a client would)."""
    async with asyncio.timeout(DEADLINE):
        while True:
            runs = [(await system.http.get(f"/v1/runs/{r}")).json() for r in run_ids]
            if all(r["status"] in ("completed", "failed", "cancelled") for r in runs):
                return runs
            await asyncio.sleep(0.05)


def companion_inputs(system: System) -> list[str]:
    """What each companion run was asked, in order (the input its first LLM request ends with)."""
    out: list[str] = []
    for body in list(system.llm.requests):
        last = body["messages"][-1]
        text = last["content"] if last["role"] == "user" else None
        if isinstance(text, str) and text.startswith(REMINDER) and text not in out:
            out.append(text)
    return out


async def test_enable_sleeptime_makes_a_companion_that_shares_the_primary_blocks(
    system: System,
) -> None:
    agent = await sleeptime_agent(system, "shares")
    assert agent.enable_sleeptime is True
    tools = {t.name for t in agent.tools}
    assert tools == {"send_message", "conversation_search", "archival_memory_search"}
    group = agent.multi_agent_group
    assert group.manager_type == "sleeptime"
    assert group.sleeptime_agent_frequency == 5
    assert group.manager_agent_id == agent.id
    (companion_id,) = group.agent_ids

    companion = (await system.http.get(f"/v1/agents/{companion_id}")).json()
    assert companion["name"] == "shares-sleeptime"
    assert companion["agent_type"] == "sleeptime_agent"
    assert {t["name"] for t in companion["tools"]} == {
        "memory_replace",
        "memory_insert",
        "memory_rethink",
        "memory_finish_edits",
    }
    assert {"type": "exit_loop", "tool_name": "memory_finish_edits"} in [
        {k: r[k] for k in ("type", "tool_name")} for r in companion["tool_rules"]
    ]
    # The same blocks (not copies), and one of its own.
    labels = {b["label"]: b["id"] for b in companion["memory"]["blocks"]}
    for block in agent.memory.blocks:
        assert labels[block.label] == block.id
        users = (await system.http.get(f"/v1/blocks/{block.id}/agents")).json()
        assert {a["id"] for a in users} == {agent.id, companion_id}
    assert "memory_persona" in labels

    groups = (await system.http.get(f"/v1/agents/{agent.id}/groups?manager_type=sleeptime")).json()
    assert [g["id"] for g in groups] == [group.id]

    # A block attached to the primary later is the companion's too.
    block = (await system.http.post("/v1/blocks/", json={"label": "prefs", "value": "tea"})).json()
    attached = await system.http.patch(
        f"/v1/agents/{agent.id}/core-memory/blocks/attach/{block['id']}"
    )
    assert attached.status_code == 200, attached.text
    users = (await system.http.get(f"/v1/blocks/{block['id']}/agents")).json()
    assert {a["id"] for a in users} == {agent.id, companion_id}

    # Turning the flag off removes companion and group; the primary edits memory again.
    off = (
        await system.http.patch(f"/v1/agents/{agent.id}", json={"enable_sleeptime": False})
    ).json()
    assert off["enable_sleeptime"] is False
    assert off["multi_agent_group"] is None
    assert "memory_replace" in {t["name"] for t in off["tools"]}
    assert (await system.http.get(f"/v1/agents/{companion_id}")).status_code == 404
    assert (await system.http.get(f"/v1/groups/{group.id}")).status_code == 404


async def test_deleting_the_primary_removes_companion_and_group(system: System) -> None:
    agent = await sleeptime_agent(system, "goes")
    (companion_id,) = agent.multi_agent_group.agent_ids
    deleted = await system.http.delete(f"/v1/agents/{agent.id}")
    assert deleted.status_code == 200
    assert (await system.http.get(f"/v1/agents/{companion_id}")).status_code == 404
    group = await system.http.get(f"/v1/groups/{agent.multi_agent_group.id}")
    assert group.status_code == 404


async def test_frequency_two_runs_the_companion_on_turns_one_three_and_five(
    system: System,
) -> None:
    agent = await sleeptime_agent(system, "every-other", frequency=2)
    (companion_id,) = agent.multi_agent_group.agent_ids
    before = len(companion_inputs(system))
    started: list[list[str]] = []
    for i in range(6):
        reply = await send(system, agent.id, f"message number {i + 1}")
        started.append(reply["usage"]["run_ids"])
        # The runs exist as soon as the reply names them.
        listed = (await system.http.get(f"/v1/runs/?agent_id={companion_id}")).json()
        assert len(listed) == sum(len(s) for s in started)
    assert [len(s) for s in started] == [1, 0, 1, 0, 1, 0]
    runs = await settled(system, [r for s in started for r in s])
    assert all(r["agent_id"] == companion_id for r in runs)
    assert all(r["background"] for r in runs)
    assert [r["status"] for r in runs] == ["completed"] * 3

    # Each companion read exactly the messages after the last one it had read.
    inputs = companion_inputs(system)[before:]
    assert len(inputs) == 3
    for n, text in enumerate(inputs):
        said = [i + 1 for i in range(6) if f"message number {i + 1}\n" in text + "\n"]
        assert said == ([1] if n == 0 else [2 * n, 2 * n + 1]), text

    # Six turns at frequency 2 leave the counter at 1 (Letta's: -1, 0, 1, 0, 1, 0, 1).
    group = (await system.http.get(f"/v1/groups/{agent.multi_agent_group.id}")).json()
    assert group["turns_counter"] == 1
    assert group["last_processed_message_id"] is not None


async def test_a_turn_counted_again_starts_its_companion_runs_once(system: System) -> None:
    """The evolution service dies after recording a turn: the redelivered end of the run
    sends the same companion runs again, and each still runs once."""
    agent = await sleeptime_agent(system, "twice", frequency=1)
    (companion_id,) = agent.multi_agent_group.agent_ids
    async with agent_events(system, agent.id) as events:
        reply = await send(system, agent.id, "one turn")
        (companion_run,) = reply["usage"]["run_ids"]
        await settled(system, [companion_run])
        await events.wait_for("RunCompleted")
        ended = next(e for e in events.seen if e.type == "RunCompleted")
        seq = events.last_seq

    # The reaction again, as a redelivery after a crash would run it.
    eventlog = await EventLog.connect(system.env["NATS_URL"], name="test-evolution")
    pool = await connect_pool(system.env["DATABASE_URL"], max_size=2)
    watcher = ProjectionWatcher(system.env["DATABASE_URL"])
    await watcher.start()
    try:
        turns = SleeptimeTurns(eventlog, pool, ProjectionReads(pool, watcher), SleeptimeBudget())
        record = Recorded(seq, subjects.agent_subject(agent.id), ended)
        # (The groups as the service's reaction looks them up: o_evolution/run_ends.py.)
        groups = (await concerned(pool, [agent.id])).groups
        await turns.on_runs_completed([record], groups)
        await turns.on_runs_completed([record], groups)
    finally:
        await watcher.stop()
        await pool.close()
        await eventlog.close()

    async with agent_events(system, companion_id) as companion:
        await companion.wait_for("RunCompleted")
        seen = await companion.drain()
    assert [e.data.run_id for e in seen if e.type == "RunStarted"] == [companion_run]
    assert [e.data.run_id for e in seen if e.type == "RunCompleted"] == [companion_run]
    runs = (await system.http.get(f"/v1/runs/?agent_id={companion_id}")).json()
    assert [r["id"] for r in runs] == [companion_run]


async def test_killed_evolution_service_still_runs_the_companion_once(system: System) -> None:
    agent = await sleeptime_agent(system, "killed", frequency=1)
    (companion_id,) = agent.multi_agent_group.agent_ids
    supervisor = system.supervisor
    restarts = supervisor.restart_count("evolution")
    async with agent_events(system, agent.id) as events:
        task = asyncio.create_task(send(system, agent.id, "a turn while the evolution dies"))
        await events.wait_for("RunCompleted")
        for pid in supervisor.pids("evolution"):
            os.kill(pid, signal.SIGKILL)
        await asyncio.wait_for(supervisor.wait_for_restarts("evolution", restarts + 1), DEADLINE)
        await task
        await events.wait_for("SleeptimeTurnCounted")
        (turn,) = [e.data for e in events.seen if e.type == "SleeptimeTurnCounted"]
        # (Read off the log: the runs projection may not have made the run yet.)
        await projected(system, events.last_seq)
    (companion_run,) = [r.run_id for r in turn.started]
    (run,) = await settled(system, [companion_run])
    assert run["status"] == "completed"
    async with agent_events(system, companion_id) as companion:
        await companion.wait_for("RunCompleted")
        seen = await companion.drain()
    assert sum(e.type == "RunStarted" for e in seen) == 1
    assert sum(e.type == "RunCompleted" for e in seen) == 1


async def test_companion_and_primary_editing_one_block_at_once_never_overwrite(
    system: System,
) -> None:
    """Both replace the same text at the same moment: one edit wins, the other is decided
    again on the fresh value and fails with a clear tool error (Letta issues #3431, #3388)."""
    agent = await sleeptime_agent(system, "race")
    (companion_id,) = agent.multi_agent_group.agent_ids
    eventlog = await EventLog.connect(system.env["NATS_URL"], name="test-race")
    try:

        async def replace(agent_id: str, new: str) -> Any:
            command = RunMemoryTool(
                agent_id=agent_id,
                run_id=new_id("run"),
                tool_call_id=new_id("cmd"),
                tool_name="memory_replace",
                arguments={"label": "human", "old_string": "lavender", "new_string": new},
            )
            envelope = Envelope.wrap(command, aggregate_id=agent_id, producer="test")
            return await send_and_wait(
                eventlog, subjects.memory_command_subject(agent_id), envelope
            )

        for round_ in range(5):
            await system.http.patch(
                f"/v1/agents/{agent.id}/core-memory/blocks/human",
                json={"value": "Favourite colour: lavender"},
            )
            primary, companion = await asyncio.gather(
                replace(agent.id, f"coral {round_}"), replace(companion_id, f"orange {round_}")
            )
            assert sorted([primary.ok, companion.ok]) == [False, True]
            loser = primary if not primary.ok else companion
            assert "lavender" in (loser.error or ""), loser.error
            block = (
                await system.http.get(f"/v1/agents/{companion_id}/core-memory/blocks/human")
            ).json()
            winner = f"coral {round_}" if primary.ok else f"orange {round_}"
            assert block["value"] == f"Favourite colour: {winner}"
    finally:
        await eventlog.close()


def reflection_prompts(llm: FakeOpenAI) -> list[str]:
    asked = [str(r["messages"][-1]["content"]) for r in list(llm.requests)]
    return [text for text in asked if "high-level insights" in text]


async def test_a_sleeptime_agent_reflects_on_the_schedule_as_its_companions_run(
    system: System, llm: FakeOpenAI
) -> None:
    """Issue 13 point 7: memories past the threshold are not reflected on when they are
    inserted but on the next turn that runs the companion, as one of its runs."""

    def answer(body: dict[str, Any]) -> Reply:
        if "high-level insights" in str(body["messages"][-1]["content"]):
            return Reply(
                content="Sam keeps healthy routines (because of 1, 2)",
                prompt_tokens=40,
                completion_tokens=9,
            )
        return echo_reply(body)

    llm.default_reply = answer
    agent = await new_agent(
        system,
        enable_sleeptime=True,
        embedding="openai/text-embedding-3-small",
        metadata={"memory_stream": {"reflection_threshold": 10}},
    )
    aid = agent["id"]
    (companion_id,) = agent["multi_agent_group"]["agent_ids"]
    sources = []
    for text, importance in (("Sam jogs every morning", 6), ("Sam cooks vegetables", 5)):
        inserted = await system.http.post(
            f"/v1/agents/{aid}/archival-memory", json={"text": text, "importance": importance}
        )
        assert inserted.status_code == 200, inserted.text
        sources.append(inserted.json()[0]["id"])

    reply = await send(system, aid, "good morning")
    runs = await settled(system, reply["usage"]["run_ids"])
    by_type = {r["request_config"]["run_type"]: r for r in runs}
    assert set(by_type) == {"sleeptime_agent_send_message_async", "sleeptime_reflection"}
    reflection = by_type["sleeptime_reflection"]
    assert reflection["agent_id"] == companion_id and reflection["background"] is True
    assert reflection["status"] == "completed", reflection
    # The run carries the reflection's cost (so the sleep-time budget counts it) ...
    usage = (await system.http.get(f"/v1/runs/{reflection['id']}/usage")).json()
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (40, 9)
    # ... and it was the only reflection: the inserts did not start one of their own
    # (had they, the threshold would have been reset and no reflection run started).
    assert len(reflection_prompts(llm)) == 1
    rows = (await system.http.get(f"/v1/agents/{aid}/archival-memory")).json()
    (insight,) = [r for r in rows if r["metadata"]["kind"] == "reflection"]
    assert insight["text"] == "Sam keeps healthy routines"
    assert insight["metadata"]["sources"] == sources

    # Reflected on: the next turn that runs the companion starts no reflection.
    group_id = agent["multi_agent_group"]["id"]
    patched = await system.http.patch(
        f"/v1/groups/{group_id}",
        json={"manager_config": {"manager_type": "sleeptime", "sleeptime_agent_frequency": 1}},
    )
    assert patched.status_code == 200, patched.text
    again = await send(system, aid, "good night")
    (review,) = await settled(system, again["usage"]["run_ids"])
    assert review["request_config"]["run_type"] == "sleeptime_agent_send_message_async"
    assert len(reflection_prompts(llm)) == 1


async def test_group_routes_and_bad_input(system: System) -> None:
    a = (await system.http.post("/v1/agents/", json={"model": "openai/gpt-4o-mini"})).json()
    b = (await system.http.post("/v1/agents/", json={"model": "openai/gpt-4o-mini"})).json()
    created = await system.http.post(
        "/v1/groups/",
        json={
            "agent_ids": [a["id"], b["id"]],
            "description": "two",
            "manager_config": {"manager_type": "round_robin", "max_turns": 3},
        },
    )
    assert created.status_code == 200, created.text
    group = created.json()
    assert (group["manager_type"], group["max_turns"], group["agent_ids"]) == (
        "round_robin",
        3,
        [a["id"], b["id"]],
    )
    listed = (await system.http.get("/v1/groups/?manager_type=round_robin")).json()
    assert group["id"] in [g["id"] for g in listed]
    mine = (await system.http.get(f"/v1/agents/{b['id']}/groups")).json()
    assert [g["id"] for g in mine] == [group["id"]]

    unknown = await system.http.post(
        "/v1/groups/",
        json={
            "agent_ids": [a["id"]],
            "description": "",
            "manager_config": {"manager_type": "swarm"},
        },
    )
    assert unknown.status_code == 422
    assert "swarm" in str(unknown.json()["detail"])
    changed = await system.http.patch(
        f"/v1/groups/{group['id']}",
        json={"manager_config": {"manager_type": "sleeptime", "sleeptime_agent_frequency": 2}},
    )
    assert changed.status_code == 400
    assert "round_robin" in changed.json()["detail"]

    agent = await sleeptime_agent(system, "bad-frequency")
    low = await system.http.patch(
        f"/v1/groups/{agent.multi_agent_group.id}",
        json={"manager_config": {"manager_type": "sleeptime", "sleeptime_agent_frequency": 0}},
    )
    assert low.status_code == 422
    missing = await system.http.post(
        "/v1/groups/",
        json={"agent_ids": [new_id("agent")], "description": ""},
    )
    assert missing.status_code == 404

    deleted = await system.http.delete(f"/v1/groups/{group['id']}")
    assert deleted.status_code == 200
    assert (await system.http.get(f"/v1/groups/{group['id']}")).status_code == 404
