"""The shadow runner runs the same loop as the live executor.

Runs are made through the live system; each is then replayed in the shadow,
on a snapshot of the agent taken from the log just before the run started,
with the model's (and effectful tools') recorded answers. The replay must
reproduce the recorded messages exactly, leave the memory blocks as the live
memory service left them, and touch nothing: no event, no command (so no
sandbox), no projection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

import asyncpg
import pytest

from o_contracts import subjects
from o_contracts.events import LLMResponded
from o_contracts.events import facts as events_facts
from o_executor.run import Completed
from o_executor.shadow import checkpoint_codec
from o_executor.shadow.runner import replay
from o_executor.shadow.snapshot import Snapshot, Snapshots, take_snapshot
from o_runtime.eventlog import EventLog, RawEvent
from tests.e2e.conftest import System
from tests.e2e.support import caught_up, new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


@pytest.fixture
async def eventlog(system: System) -> AsyncIterator[EventLog]:
    log = await EventLog.connect(system.env["NATS_URL"], name="shadow-test")
    yield log
    await log.close()


async def world(eventlog: EventLog, system: System) -> dict[str, Any]:
    """What a shadow run must not change: the streams' ends and every projection's checkpoint.

    Looked at once every projection has reached the last event it follows: checkpoints move
    lazily past events a projection does not handle, so two looks at an unchanged log could
    differ otherwise (seen on CI: a checkpoint moved during a replay that appended nothing).
    """
    await caught_up(system)
    events = await eventlog.js.stream_info(subjects.EVENTS_STREAM)
    commands = await eventlog.js.stream_info(subjects.COMMANDS_STREAM)
    conn = await asyncpg.connect(system.env["DATABASE_URL"])
    try:
        checkpoints = {
            r["projection"]: r["last_seq"]
            for r in await conn.fetch("SELECT projection, last_seq FROM projection_checkpoints")
        }
    finally:
        await conn.close()
    return {
        "events": events.state.last_seq,
        "commands": commands.state.last_seq,
        "checkpoints": checkpoints,
    }


async def last_run_id(system: System, agent_id: str) -> str:
    runs = (await system.http.get("/v1/runs/", params={"agent_id": agent_id})).json()
    run_id: str = runs[0]["id"]
    return run_id


async def block_value(system: System, agent_id: str, label: str) -> str:
    block = await system.http.get(f"/v1/agents/{agent_id}/core-memory/blocks/{label}")
    value: str = block.json()["value"]
    return value


async def own_human_conversation(system: System, agent_id: str) -> dict[str, Any]:
    """A named conversation of the agent's with its own copy of the `human` block."""
    made = await system.http.post(
        "/v1/conversations/",
        params={"agent_id": agent_id},
        json={"isolated_block_labels": ["human"]},
    )
    assert made.status_code == 200, made.text
    conversation: dict[str, Any] = made.json()
    return conversation


async def say_in(system: System, conversation_id: str, text: str) -> dict[str, Any]:
    """A message sent in a named conversation, answered (not streamed)."""
    said = await system.http.post(
        f"/v1/conversations/{conversation_id}/messages",
        json={"messages": [{"role": "user", "content": text}], "streaming": False},
    )
    assert said.status_code == 200, said.text
    answer: dict[str, Any] = said.json()
    return answer


# What a step measured (events/runs.py LLMResponded): a replay asks no model, so these
# are its own; everything else it records is the recorded run's.
_TIMINGS = {"step_start_ns": None, "llm_request_start_ns": None, "llm_request_ns": None}


def facts(events: list[Any]) -> list[Any]:
    """The facts recorded (a run's end with its last answer is two), timings aside."""
    return [
        e.model_copy(update=_TIMINGS) if isinstance(e, LLMResponded) else e
        for event in events
        for e in events_facts(event)
    ]


async def test_a_recorded_run_replayed_in_the_shadow_reproduces_it_exactly(
    system: System, llm: FakeOpenAI, eventlog: EventLog
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="Hi Sam."))
    await send(system, agent["id"], "hello")  # some history before the replayed run
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})]),
        Reply(tool_calls=[("conversation_search", {"query": "hello"})]),
        Reply(content="Noted, and we said hello before."),
    )
    await send(system, agent["id"], "I like tea; did we talk before?")
    run_id = await last_run_id(system, agent["id"])
    before = await world(eventlog, system)

    recorded, shadow = await replay(eventlog, agent["id"], run_id)

    assert await world(eventlog, system) == before
    assert isinstance(shadow.outcome, Completed)
    assert shadow.outcome.stop_reason == "end_turn"
    roles = ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [m.role for m in recorded.messages] == roles
    assert shadow.messages == recorded.messages
    human = next(b for b in shadow.blocks if b["label"] == "human")
    assert human["value"] == await block_value(system, agent["id"], "human")
    # The events the shadow would have recorded are the recorded ones (ids included).
    assert facts([e.data for e in shadow.overlay.events]) == facts(recorded.events)


async def test_a_memgpt_run_with_heartbeats_and_a_user_tool_replays_exactly(
    system: System, llm: FakeOpenAI, eventlog: EventLog
) -> None:
    source = '''
def shadow_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city.
    """
    return f"Rain in {city}"
'''
    tool = await system.http.post("/v1/tools/", json={"source_code": source})
    assert tool.status_code == 200, tool.text
    agent = await new_agent(system, agent_type="memgpt_v2_agent", tool_ids=[tool.json()["id"]])
    beat = {"request_heartbeat": True}
    llm.push(
        Reply(tool_calls=[("shadow_weather", {"city": "Bergen", **beat})]),
        Reply(
            tool_calls=[("memory_insert", {"label": "human", "new_string": "In Bergen", **beat})]
        ),
        Reply(tool_calls=[("send_message", {"message": "Rain in Bergen; noted."})]),
    )
    result = await send(system, agent["id"], "weather in Bergen?")
    assert result["stop_reason"]["stop_reason"] == "end_turn"
    run_id = await last_run_id(system, agent["id"])
    before = await world(eventlog, system)

    recorded, shadow = await replay(eventlog, agent["id"], run_id)

    # Nothing ran for real: no sandbox command, no event, no projection moved.
    assert await world(eventlog, system) == before
    assert shadow.messages == recorded.messages
    weather = next(m for m in shadow.messages if m.role == "tool" and m.name == "shadow_weather")
    assert weather.content == "Rain in Bergen"
    human = next(b for b in shadow.blocks if b["label"] == "human")
    assert human["value"] == await block_value(system, agent["id"], "human")


async def test_a_snapshot_from_the_log_matches_what_the_projections_show(
    system: System, llm: FakeOpenAI, eventlog: EventLog
) -> None:
    agent = await new_agent(system)
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Has: a dog"})]),
        Reply(content="A dog!"),
        Reply(content="Second answer."),
    )
    await send(system, agent["id"], "I have a dog")
    await send(system, agent["id"], "and a cat")
    patched = await system.http.patch(
        f"/v1/agents/{agent['id']}/core-memory/blocks/persona", json={"value": "Patient."}
    )
    assert patched.status_code == 200
    inserted = await system.http.post(
        f"/v1/agents/{agent['id']}/archival-memory",
        json={"text": "Sam's dog is called Rex", "tags": ["pets"], "importance": 4},
    )
    assert inserted.status_code == 200
    events = await eventlog.js.stream_info(subjects.EVENTS_STREAM)
    snapshot = await take_snapshot(eventlog, agent["id"], events.state.last_seq)

    history = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    # (The system message the API shows first is not history a run reads.)
    assert history[0]["message_type"] == "system_message"
    shown = list(dict.fromkeys(m["id"] for m in history[1:]))
    assert [m.id for m in snapshot.history()] == shown
    # In the prompt's order: the agent's (the blocks list route pages by id, as Letta's).
    blocks = (await system.http.get(f"/v1/agents/{agent['id']}")).json()["memory"]["blocks"]
    assert [(b["label"], b["value"], b["limit"]) for b in snapshot.blocks] == [
        (b["label"], b["value"], b["limit"]) for b in blocks
    ]
    core = snapshot.core_memory()
    assert (core["archival_count"], core["archival_tags"]) == (1, ["pets"])
    assert snapshot.agent.tools == tuple(t["name"] for t in agent["tools"])


async def test_a_run_in_a_forked_conversation_with_its_own_block_replays_exactly(
    system: System, llm: FakeOpenAI, eventlog: EventLog
) -> None:
    agent = await new_agent(system)
    http = system.http
    source = await own_human_conversation(system, agent["id"])
    llm.push(Reply(content="Tea noted."))
    await say_in(system, source["id"], "I like tea")
    fork = (await http.post(f"/v1/conversations/{source['id']}/fork")).json()
    (own,) = fork["isolated_block_ids"]
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})]),
        Reply(content="Remembered."),
    )
    done = await say_in(system, fork["id"], "remember it")
    run_id = done["usage"]["run_ids"][0]
    # The model saw the fork's inherited history, and the shadow's replay sees the same.
    sent = [m.get("content") for m in llm.requests[-2]["messages"][1:]]
    assert sent == ["I like tea", "Tea noted.", "remember it"]
    before = await world(eventlog, system)

    recorded, shadow = await replay(eventlog, agent["id"], run_id, fork["id"])

    assert await world(eventlog, system) == before
    assert isinstance(shadow.outcome, Completed)
    assert shadow.messages == recorded.messages
    assert facts([e.data for e in shadow.overlay.events]) == facts(recorded.events)
    # The fork's own copy of the block, not the agent's, is what the run edited.
    human = next(b for b in shadow.blocks if b["label"] == "human")
    assert human["value"] == (await http.get(f"/v1/blocks/{own}")).json()["value"]
    assert human["value"] == "Name: Sam\nLikes: tea"
    assert await block_value(system, agent["id"], "human") == "Name: Sam"


async def test_snapshots_carried_forward_are_each_the_snapshot_taken_alone(
    system: System, llm: FakeOpenAI, eventlog: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An evaluation takes its cases' snapshots in one pass (Snapshots.many): each subject
    read on from where the snapshot before left it. Whatever the order asked, including
    positions before one already taken, each must be the snapshot taken alone; and in
    order, the agent's subject is read once, each read starting after the last."""
    http = system.http
    agent = await new_agent(system)
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Has: a dog"})]),
        Reply(content="A dog!"),
    )
    await send(system, agent["id"], "I have a dog")
    inserted = await http.post(
        f"/v1/agents/{agent['id']}/archival-memory",
        json={"text": "Sam's dog is called Rex", "tags": ["pets"]},
    )
    assert inserted.status_code == 200, inserted.text
    named = await own_human_conversation(system, agent["id"])
    llm.push(Reply(content="Noted: I like tea."))
    await say_in(system, named["id"], "I like tea")
    llm.push(Reply(content="Noted: and a cat."))
    await send(system, agent["id"], "and a cat", streaming=False)
    fork = (await http.post(f"/v1/conversations/{named['id']}/fork")).json()
    llm.push(Reply(content="Still tea."))
    await say_in(system, fork["id"], "tea?")
    # The default conversation's messages leave the context, then one more run there.
    reset = await http.patch(f"/v1/agents/{agent['id']}/reset-messages")
    assert reset.status_code == 200, reset.text
    patched = await http.patch(
        f"/v1/agents/{agent['id']}/core-memory/blocks/persona", json={"value": "Patient."}
    )
    assert patched.status_code == 200, patched.text
    llm.push(Reply(content="A fresh start."))
    await send(system, agent["id"], "hello again")
    await caught_up(system)
    conn = await asyncpg.connect(system.env["DATABASE_URL"])
    try:
        runs = await conn.fetch(
            "SELECT conversation_id, started_seq FROM runs WHERE agent_id = $1"
            " ORDER BY started_seq",
            agent["id"],
        )
    finally:
        await conn.close()
    assert len(runs) == 5
    end = (await eventlog.js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    in_order = [(r["started_seq"] - 1, r["conversation_id"]) for r in runs] + [(end, None)]

    def shown(s: Snapshot) -> Any:
        return (s.seq, s.agent, s.blocks, s.history(), s.core_memory())

    alone = [shown(await take_snapshot(eventlog, agent["id"], *w)) for w in in_order]
    # The last snapshot: after the reset, only the run since is in context.
    assert [m.content for m in alone[-1][3]] == ["hello again", "A fresh start."]

    starts: list[tuple[str, int]] = []
    replay = eventlog.replay

    async def counted(subject: str, start_seq: int = 1) -> AsyncGenerator[RawEvent]:
        starts.append((subject, start_seq))
        async with aclosing(replay(subject, start_seq)) as events:
            async for raw in events:
                yield raw

    monkeypatch.setattr(eventlog, "replay", counted)
    carried = await Snapshots(eventlog).many(agent["id"], in_order)
    assert [shown(s) for s in carried] == alone
    agent_subject = subjects.agent_subject(agent["id"])
    agent_reads = [start for subject, start in starts if subject == agent_subject]
    # Read on from each position asked (where anything came since), never from the start again.
    assert agent_reads[0] == 1
    assert agent_reads[1:] == sorted(set(agent_reads[1:]))
    assert set(agent_reads[1:]) <= {seq + 1 for seq, _ in in_order}

    # The next evaluation reads on from a checkpoint of this one's first case (its cases,
    # the latest runs then, begin there or later), not from the agent's first event.
    first = Snapshots(eventlog)
    await first.at(agent["id"], *in_order[1])
    checkpoint = await first.checkpoint(in_order[1][0])
    starts.clear()
    later = await Snapshots(eventlog, checkpoint).many(agent["id"], in_order[2:])
    assert [shown(s) for s in later] == alone[2:]
    agent_reads = [start for subject, start in starts if subject == agent_subject]
    assert agent_reads[0] == in_order[1][0] + 1
    # The checkpoint is as it was (copied, not moved on by the evaluation that used it).
    starts.clear()
    assert (await Snapshots(eventlog, checkpoint).at(agent["id"], *in_order[-1])).seq == end
    assert [s for subject, s in starts if subject == agent_subject] == [in_order[1][0] + 1]
    # (And one before the checkpoint: that subject folded again from its start.)
    earlier = await Snapshots(eventlog, checkpoint).at(agent["id"], *in_order[0])
    assert shown(earlier) == alone[0]
    # Kept beyond the process (o_evolution/checkpoints.py): as bytes and back, the same.
    restored = checkpoint_codec.decode(checkpoint_codec.encode(checkpoint))
    assert restored == checkpoint
    later = await Snapshots(eventlog, restored).many(agent["id"], in_order[2:])
    assert [shown(s) for s in later] == alone[2:]

    # Asked out of order (many takes them in order, answers in the order asked).
    order = (3, 0, 5, 1, 4, 2)
    again = await Snapshots(eventlog).many(agent["id"], [in_order[i] for i in order])
    assert [shown(s) for s in again] == [alone[i] for i in order]
    # One at a time, positions before one already taken included: folded again from the start.
    snapshots = Snapshots(eventlog)
    for i in order:
        assert shown(await snapshots.at(agent["id"], *in_order[i])) == alone[i]
    # Asked at once (two analyses of one agent's canary): one at a time all the same, so no
    # fold has its new events applied twice (the memory_insert's edit, say).
    snapshots = Snapshots(eventlog)
    together = await asyncio.gather(*(snapshots.at(agent["id"], *w) for w in in_order))
    assert [shown(s) for s in together] == alone
