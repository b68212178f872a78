"""A message to an agent the gateway has read goes before the agent is read
(o_gateway/seen_agents.py, `StartRun.enqueue_only`), and is answered, refused and queued
exactly as when the agent is read first."""

from __future__ import annotations

import asyncio
from typing import Any

import letta_client
import pytest

from o_contracts import subjects
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope, decode
from o_contracts.ids import new_id
from o_contracts.models import ChatMessage
from o_runtime.commands import REPLY_HEADER, decode_reply
from tests.e2e.conftest import System
from tests.e2e.support import (
    DEADLINE,
    connected,
    event_types,
    new_agent,
    on_subject,
    send,
    until,
)
from tests.e2e.test_approvals import INSERT
from tests.e2e.test_concurrency_policy import held, said, sent
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


async def started_runs(system: System, agent_id: str) -> list[StartRun]:
    """The agent's StartRun commands (its default conversation's), in the order sent."""
    async with connected(system) as nc:
        subject = subjects.executor_command_subject(agent_id)
        commands = [
            decode(raw).data for _, raw in await on_subject(nc, subject, subjects.COMMANDS_STREAM)
        ]
    return [command for command in commands if isinstance(command, StartRun)]


async def events_of(system: System, agent_id: str) -> list[str]:
    """The types of the agent's events, in order."""
    async with connected(system) as nc:
        return [kind for _, kind in await event_types(nc, subjects.agent_subject(agent_id))]


async def test_messages_to_an_agent_read_once_go_before_the_read_and_are_answered_alike(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    texts = [f"message {i}" for i in range(4)]
    llm.push(*(Reply(content=f"answer {i}") for i in range(4)))
    answers = [await send(system, agent["id"], text) for text in texts]
    for i, answer in enumerate(answers):
        shown = [(m["message_type"], m.get("content")) for m in answer["messages"]]
        assert shown == [("assistant_message", f"answer {i}")]
        assert answer["stop_reason"]["stop_reason"] == "end_turn"
        assert answer["usage"]["step_count"] == 1
    commands = await started_runs(system, agent["id"])
    assert [c.messages[0].content for c in commands] == texts
    # The first was read first (the gateway had not met the agent); every later one went
    # first.
    assert [c.enqueue_only for c in commands] == [False, True, True, True]
    # Recorded once each, as any message.
    listed = (
        await system.http.get(f"/v1/agents/{agent['id']}/messages", params={"limit": 50})
    ).json()
    users = [m["content"] for m in listed if m["message_type"] == "user_message"]
    assert users == texts


async def test_a_default_changed_to_reject_meets_the_first_message_after_it(
    system: System, llm: FakeOpenAI
) -> None:
    client = system.client()
    agent = await new_agent(system)
    llm.push(Reply(content="warm"))
    await send(system, agent["id"], "warm up")  # (read: the gateway now knows the agent)
    with held() as release:
        llm.push(Reply(content="first done", release=release))
        first = sent(client, agent["id"], "first")
        await until(llm, lambda reqs: len(reqs) == 2)
        # The default changes while a run is in flight ...
        patched = await system.http.patch(
            f"/v1/agents/{agent['id']}", json={"concurrency": "reject"}
        )
        assert patched.status_code == 200, patched.text
        # ... and the next message is refused at once as Letta's busy conversation, not
        # queued behind the run in flight (sent before the agent was read, it found a run
        # ahead of it at the executor under a default that does not queue: it left the
        # queue, and the gateway read the agent and refused it).
        second = sent(client, agent["id"], "second")
        with pytest.raises(letta_client.ConflictError):
            await asyncio.wait_for(second, DEADLINE)
        release.set()
        assert said(await first) == ["first done"]
    # The refused command left the commands stream: the next message is not held behind it.
    llm.push(Reply(content="third done"))
    third = await send(system, agent["id"], "third")
    assert [m.get("content") for m in third["messages"]] == ["third done"]
    commands = await started_runs(system, agent["id"])
    assert [c.messages[0].content for c in commands] == ["warm up", "first", "third"]
    # (Read when the default was reject: the third went the usual way.)
    assert commands[2].enqueue_only is False


async def test_a_command_sent_unread_leaves_the_queue_where_the_agents_default_does_not_queue(
    system: System, llm: FakeOpenAI
) -> None:
    client = system.client()
    agent = await new_agent(system, concurrency="interrupt")

    async def start_unread(text: str) -> Any:
        command = StartRun(
            run_id=new_id("run"),
            agent_id=agent["id"],
            messages=[ChatMessage(id=new_id("message"), role="user", content=text)],
            enqueue_only=True,
        )
        envelope = Envelope.wrap(command, aggregate_id=agent["id"], producer="test")
        async with connected(system) as nc:
            inbox = nc.new_inbox()
            replies = await nc.subscribe(inbox, max_msgs=1)
            await nc.jetstream().publish(
                subjects.executor_command_subject(agent["id"]),
                envelope.encode(),
                stream=subjects.COMMANDS_STREAM,
                headers={"Nats-Msg-Id": envelope.id, REPLY_HEADER: inbox},
            )
            return decode_reply((await replies.next_msg(timeout=DEADLINE)).data)

    # No run in flight: it runs, whatever the default.
    llm.push(Reply(content="alone"))
    alone = await start_unread("alone")
    assert alone.ok, alone
    with held() as release:
        llm.push(Reply(content="first done", release=release))
        first = sent(client, agent["id"], "first")
        await until(llm, lambda reqs: len(reqs) == 2)
        before = await events_of(system, agent["id"])
        # A run in flight: refused at once (the first is still held), nothing recorded.
        reply = await start_unread("behind")
        assert (reply.ok, reply.status, reply.result) == (False, 409, {"concurrency": "interrupt"})
        assert await events_of(system, agent["id"]) == before
        release.set()
        assert said(await first) == ["first done"]
    contents = [c.messages[0].content for c in await started_runs(system, agent["id"])]
    assert contents == ["alone", "first"]


async def test_a_plain_message_while_a_call_waits_is_refused_in_the_apis_words(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(
        system, tool_rules=[{"type": "requires_approval", "tool_name": INSERT[0]}]
    )
    llm.push(Reply(tool_calls=[INSERT]))
    asked = await send(system, agent["id"], "I like chess")
    request = asked["messages"][0]
    before = await events_of(system, agent["id"])
    busy = await system.http.post(f"/v1/agents/{agent['id']}/messages", json={"input": "hello?"})
    assert busy.status_code == 409
    detail = busy.json()["detail"]
    assert detail["code"] == "PENDING_APPROVAL"
    assert detail["pending_request_id"] == request["id"]
    assert detail["pending_tool_call_ids"] == [request["tool_call"]["tool_call_id"]]
    assert await events_of(system, agent["id"]) == before


async def test_a_message_to_a_deleted_agent_is_404_in_the_apis_words(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="hello"))
    await send(system, agent["id"], "hi")
    deleted = await system.http.delete(f"/v1/agents/{agent['id']}")
    assert deleted.status_code == 200, deleted.text
    gone = await system.http.post(f"/v1/agents/{agent['id']}/messages", json={"input": "there?"})
    assert gone.status_code == 404
    assert gone.json() == {"detail": f"Agent {agent['id']} not found"}
