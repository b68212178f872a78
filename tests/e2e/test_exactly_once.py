"""Exactly once: a command whose work is done is answered from the log, never done again.

JetStream delivers a command again whenever its ack is lost (the consumer died
between finishing and acking, nats-server restarted), and outside systems may
publish a command twice. These tests publish finished commands again under a
fresh `Nats-Msg-Id` (past the stream's duplicate window, as a late redelivery
would be) and check that nothing new happens: no LLM call, no event, no
memory edit, and the reply is the recorded outcome.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from o_contracts import subjects
from o_contracts.base import Reply as CommandReply
from o_contracts.envelope import Envelope, decode
from o_runtime.commands import REPLY_HEADER, decode_reply
from tests.e2e.conftest import System
from tests.e2e.test_messages import new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


@asynccontextmanager
async def connected(system: System) -> AsyncIterator[Client]:
    nc = await nats.connect(system.env["NATS_URL"])
    try:
        yield nc
    finally:
        await nc.close()


async def last_command(nc: Client, subject: str) -> Envelope[Any]:
    msg = await nc.jetstream().get_last_msg(subjects.COMMANDS_STREAM, subject)
    return decode(msg.data or b"")


async def publish_again(nc: Client, subject: str, command: Envelope[Any]) -> CommandReply:
    """Publish `command` under a Nats-Msg-Id the stream has not seen; wait for its reply."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.jetstream().publish(
            subject,
            command.encode(),
            stream=subjects.COMMANDS_STREAM,
            headers={"Nats-Msg-Id": f"again-{uuid.uuid4()}", REPLY_HEADER: inbox},
        )
        msg = await sub.next_msg(timeout=30)
        return decode_reply(msg.data)
    finally:
        await sub.unsubscribe()


async def subject_events(nc: Client, subject: str) -> list[tuple[int, str]]:
    """(stream sequence, type) of every event on `subject`."""
    js = nc.jetstream()
    out: list[tuple[int, str]] = []
    seq = 1
    while True:
        try:
            msg = await js.get_msg(subjects.EVENTS_STREAM, seq=seq, subject=subject, next=True)
        except nats.js.errors.NotFoundError:
            return out
        out.append((int(msg.seq or 0), decode(msg.data or b"").type))
        seq = int(msg.seq or 0) + 1


async def human_block(system: System, agent_id: str) -> dict[str, Any]:
    response = await system.http.get(f"/v1/agents/{agent_id}/core-memory/blocks/human")
    assert response.status_code == 200, response.text
    block: dict[str, Any] = response.json()
    return block


async def test_a_finished_run_published_again_is_answered_from_the_log(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})]),
        Reply(content="Noted."),
    )
    result = await send(system, agent["id"], "I like tea")
    assert result["stop_reason"]["stop_reason"] == "end_turn"
    asked = len(llm.requests)
    block = await human_block(system, agent["id"])
    assert block["value"] == "Name: Sam\nLikes: tea"
    async with connected(system) as nc:
        subject = subjects.executor_command_subject(agent["id"])
        start = await last_command(nc, subject)
        before = await subject_events(nc, subjects.agent_subject(agent["id"]))
        reply = await publish_again(nc, subject, start)
        # Also under a new envelope id: the run's id is what makes it the same run.
        renamed = Envelope.wrap(start.data, aggregate_id=agent["id"], producer="test")
        reply_renamed = await publish_again(nc, subject, renamed)
        after = await subject_events(nc, subjects.agent_subject(agent["id"]))
    assert reply.ok and reply.result == {"stop_reason": "end_turn"}
    assert reply_renamed.ok and reply_renamed.seq == reply.seq
    # Answered from the record: the completion's sequence, nothing appended.
    assert reply.seq == max(seq for seq, kind in before if kind == "RunCompleted")
    assert after == before
    assert len(llm.requests) == asked
    assert (await human_block(system, agent["id"]))["value"] == "Name: Sam\nLikes: tea"
    # The agent goes on normally afterwards.
    llm.push(Reply(content="still here"))
    assert (await send(system, agent["id"], "next"))["messages"][0]["content"] == "still here"


async def test_a_memory_edit_delivered_again_is_not_applied_twice(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Has: a cat"})]),
        Reply(content="Cat noted."),
    )
    await send(system, agent["id"], "I have a cat")
    block = await human_block(system, agent["id"])
    async with connected(system) as nc:
        subject = subjects.memory_command_subject(agent["id"])
        edit = await last_command(nc, subject)
        assert edit.type == "RunMemoryTool"
        before = await subject_events(nc, subjects.block_subject(block["id"]))
        reply = await publish_again(nc, subject, edit)
        after = await subject_events(nc, subjects.block_subject(block["id"]))
    assert reply.ok, reply.error
    assert reply.seq == before[-1][0]
    assert after == before
    assert (await human_block(system, agent["id"]))["value"] == "Name: Sam\nHas: a cat"


async def test_block_commands_delivered_again_answer_as_the_first_time(system: System) -> None:
    created = await system.http.post("/v1/blocks/", json={"label": "notes", "value": "one"})
    assert created.status_code == 200, created.text
    block_id = created.json()["id"]
    patched = await system.http.patch(f"/v1/blocks/{block_id}", json={"value": "two"})
    assert patched.status_code == 200, patched.text
    async with connected(system) as nc:
        subject = subjects.memory_command_subject(block_id)
        js = nc.jetstream()
        commands = []
        seq = 1
        while True:
            try:
                msg = await js.get_msg(
                    subjects.COMMANDS_STREAM, seq=seq, subject=subject, next=True
                )
            except nats.js.errors.NotFoundError:
                break
            commands.append(decode(msg.data or b""))
            seq = int(msg.seq or 0) + 1
        assert [c.type for c in commands] == ["CreateBlock", "UpdateBlock"]
        before = await subject_events(nc, subjects.block_subject(block_id))
        replies = [await publish_again(nc, subject, c) for c in commands]
        after = await subject_events(nc, subjects.block_subject(block_id))
    assert [(r.ok, r.status) for r in replies] == [(True, 200), (True, 200)]
    assert [r.seq for r in replies] == [seq for seq, _ in before]
    assert after == before
    versions = (await system.http.get(f"/v1/blocks/{block_id}/versions")).json()
    assert [v["value"] for v in versions] == ["one", "two"]
