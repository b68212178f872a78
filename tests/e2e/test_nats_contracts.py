"""Other systems talk to O over NATS: publish commands, read events, get rejections."""

from __future__ import annotations

import json
from dataclasses import replace

import msgpack
import nats
import pytest
from nats.js import JetStreamContext

from o_contracts import subjects
from o_contracts.commands import StartRun, UpdateBlock
from o_contracts.envelope import Envelope, decode
from o_contracts.events import RunCompleted
from o_contracts.ids import new_id
from o_contracts.models import ChatMessage
from o_executor.run_answers import RUN_AND_MESSAGES, rows_of, unpacked
from o_runtime.commands import decode_reply
from o_runtime.db import connect_pool
from o_runtime.waiting import ProjectionWatcher
from tests.e2e.conftest import System
from tests.e2e.support import new_agent
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.servers import operator

pytestmark = pytest.mark.e2e


async def follow(js: JetStreamContext, subject: str) -> JetStreamContext.PushSubscription:
    """What is appended to `subject` from now on, in order (an ordered consumer)."""
    return await js.subscribe(
        subject,
        stream=subjects.EVENTS_STREAM,
        ordered_consumer=True,
        deliver_policy=nats.js.api.DeliverPolicy.NEW,
    )


async def test_an_external_publisher_runs_an_agent_over_nats(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    js = nc.jetstream()
    try:
        events = await follow(js, subjects.agent_subject(agent["id"]))
        inbox = nc.new_inbox()
        replies = await nc.subscribe(inbox, max_msgs=1)
        run_id = new_id("run")
        command = Envelope.wrap(
            StartRun(
                run_id=run_id,
                agent_id=agent["id"],
                messages=[ChatMessage(id=new_id("message"), role="user", content="from NATS")],
            ),
            aggregate_id=agent["id"],
            producer="partner-system",
        )
        llm.push(Reply(content="hello NATS"))
        await js.publish(
            subjects.executor_command_subject(agent["id"]),
            command.encode(),
            stream=subjects.COMMANDS_STREAM,
            headers={"Nats-Msg-Id": command.id, "O-Reply-To": inbox},
        )
        reply = decode_reply((await replies.next_msg(timeout=30)).data)
        assert reply.ok and reply.result is not None
        assert reply.result["stop_reason"] == "end_turn"
        seen = []
        while True:
            env = decode((await events.next_msg(timeout=10)).data)
            seen.append(env.type)
            if isinstance(env.data, RunCompleted):
                assert env.correlation_id == command.id
                break
        # The answer that ended the run rides in its RunCompleted (events/runs.py).
        assert seen == ["RunStarted", "RunCompleted"]
        assert env.data.answer is not None and env.data.answer.message.content == "hello NATS"
    finally:
        await nc.close()
    # The reply comes once the events are in the log; the messages listing reads the
    # runs projection, so wait until it has applied the run's last event.
    watcher = ProjectionWatcher(system.env["DATABASE_URL"])
    await watcher.start()
    try:
        assert reply.seq is not None
        await watcher.wait(reply.seq, "runs", timeout=30)
    finally:
        await watcher.stop()
    history = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    assert [m.get("content") for m in history[1:]] == ["from NATS", "hello NATS"]
    # Run by the replica that follows the runs projection, the reply carries the run's
    # answer as the projection committed it (o_executor/run_answers.py); by the other,
    # none (the gateway reads it back).
    carried = unpacked(reply.result.get("response"))
    if carried is not None:
        pool = await connect_pool(system.env["DATABASE_URL"], max_size=1)
        try:
            read_back = rows_of(await pool.fetch(RUN_AND_MESSAGES, run_id, None))
        finally:
            await pool.close()
        # (Each body as the JSON it is: Postgres renders jsonb's text its own way.)
        assert [replace(r, body=json.loads(r.body or "null")) for r in carried] == [
            replace(r, body=json.loads(r.body or "null")) for r in read_back
        ]
        assert [json.loads(r.body or "")["content"] for r in carried] == ["hello NATS"]


async def test_a_malformed_command_is_dead_lettered_and_the_consumer_goes_on(
    system: System,
) -> None:
    agent = await new_agent(system)
    block_id = next(b["id"] for b in agent["blocks"] if b["label"] == "human")
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    js = nc.jetstream()
    try:
        inbox = nc.new_inbox()
        replies = await nc.subscribe(inbox, max_msgs=2)
        garbage = msgpack.packb(
            {
                "id": "x",
                "type": "UpdateBlock",
                "v": 1,
                "aggregate_id": "a",
                "time": "2026-01-01T00:00:00Z",
                "producer": "p",
                "data": {"block_id": 42},
            }
        )
        bad = await js.publish(
            subjects.memory_command_subject(block_id),
            garbage,
            stream=subjects.COMMANDS_STREAM,
            headers={"Nats-Msg-Id": new_id("cmd"), "O-Reply-To": inbox},
        )
        good = Envelope.wrap(
            UpdateBlock(block_id=block_id, changes={"value": "Name: Ada"}),
            aggregate_id=block_id,
            producer="partner-system",
        )
        await js.publish(
            subjects.memory_command_subject(block_id),
            good.encode(),
            stream=subjects.COMMANDS_STREAM,
            headers={"Nats-Msg-Id": good.id, "O-Reply-To": inbox},
        )
        first = decode_reply((await replies.next_msg(timeout=30)).data)
        second = decode_reply((await replies.next_msg(timeout=30)).data)
        assert (first.ok, first.status) == (False, 400)
        assert "block_id" in (first.error or "")
        assert second.ok
        dead = await js.get_last_msg(
            subjects.DEAD_LETTER_STREAM, subjects.dead_letter_subject("memory")
        )
        assert dead.headers is not None
        assert int(dead.headers["O-Origin-Seq"]) == bad.seq
        assert "invalid UpdateBlock" in dead.headers["O-Reason"]
    finally:
        await nc.close()
    human = (await system.http.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human")).json()
    assert human["value"] == "Name: Ada"


async def test_an_external_publisher_adds_and_searches_archival_memory(
    system: System, llm: FakeOpenAI
) -> None:
    from o_contracts.commands import InsertPassage
    from o_contracts.events import PassageInserted
    from o_contracts.requests import ArchivalResults, SearchArchival

    agent = await new_agent(system, embedding="openai/text-embedding-3-small")
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    js = nc.jetstream()
    try:
        events = await follow(js, subjects.archival_subject(agent["id"]))
        inbox = nc.new_inbox()
        replies = await nc.subscribe(inbox, max_msgs=2)
        for text in ("ticket ZX-991 is about the broken lift", " "):
            command = Envelope.wrap(
                InsertPassage(
                    agent_id=agent["id"], passage_id=new_id("passage"), text=text, importance=6
                ),
                aggregate_id=agent["id"],
                producer="partner-system",
            )
            await js.publish(
                subjects.memory_command_subject(agent["id"]),
                command.encode(),
                stream=subjects.COMMANDS_STREAM,
                headers={"Nats-Msg-Id": command.id, "O-Reply-To": inbox},
            )
            reply = decode_reply((await replies.next_msg(timeout=30)).data)
            if text.strip():
                assert reply.ok and reply.result
                assert reply.result["passage"]["text"] == text
            else:
                assert not reply.ok and reply.error == "text must not be empty"
        event = await events.next_msg(timeout=10)
        inserted, inserted_seq = decode(event.data).data, event.metadata.sequence.stream
        assert isinstance(inserted, PassageInserted)
        assert inserted.passage.embedding_model == "openai/text-embedding-3-small"
        assert inserted.passage.importance_source == "caller"
        found = ArchivalResults.decode(
            (
                await nc.request(
                    subjects.MEMORY_SEARCH_ARCHIVAL,
                    SearchArchival(agent_id=agent["id"], query="ZX-991", top_k=1).encode(),
                    timeout=30,
                )
            ).data
        )
        assert found.ok and [r["text"] for r in found.results] == [
            "ticket ZX-991 is about the broken lift"
        ]
        refused = ArchivalResults.decode(
            (
                await nc.request(
                    subjects.MEMORY_SEARCH_ARCHIVAL, msgpack.packb({"agent_id": "x"}), timeout=30
                )
            ).data
        )
        assert not refused.ok and refused.status == 422 and "query" in (refused.error or "")
        # Core memory as a prompt shows it: the blocks in order, what the archive holds.
        core = msgpack.unpackb(
            (
                await nc.request(
                    subjects.MEMORY_READ_CORE,
                    msgpack.packb({"agent_id": agent["id"], "min_seq": inserted_seq}),
                    timeout=30,
                )
            ).data
        )
        assert [(b["label"], b["value"]) for b in core["blocks"]] == [
            ("human", "Name: Sam"),
            ("persona", "Helpful."),
        ]
        assert core["archival_count"] == 1 and core["archival_tags"] == []
    finally:
        await nc.close()
