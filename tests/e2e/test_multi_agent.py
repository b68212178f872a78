"""Letta's multi-agent tools through the official SDK: one agent messaging others as runs on
their lanes, waited for durably (Letta's integration_test_multi_agent.py, scripted).

The scripted model: a user message `tool:NAME {json}` calls NAME with those arguments; a
message from another agent is answered `<agent id> heard: <its text>`; a tool's result is
answered `done: <result>`.
"""

from __future__ import annotations

import ast
import asyncio
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import letta_client
import nats
import pytest
from nats.js.api import DeliverPolicy

from o_contracts import subjects
from o_contracts.envelope import Envelope, decode
from o_contracts.events import facts
from o_contracts.ids import derived_id
from tests.e2e.conftest import System
from tests.e2e.support import DEADLINE, agent_events, projected, until
from tests.e2e.test_durable_runs import kill_executors
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply
from tests.servers import operator

pytestmark = pytest.mark.e2e

WAIT = "send_message_to_agent_and_wait_for_reply"
NOTIFY = "send_message_to_agent_async"
BROADCAST = "send_message_to_agents_matching_tags"
INCOMING = "[Incoming message from agent with ID '"
# tests/e2e/conftest.py: O_AGENT_REPLY_TIMEOUT
REPLY_TIMEOUT = 10


def text_of(message: dict[str, Any]) -> str:
    return str(message.get("content") or "")


def agent_of(body: dict[str, Any]) -> str:
    """The agent a request is for (its system prompt names it)."""
    prompt = text_of(body["messages"][0])
    return prompt.split("- AGENT_ID: ", 1)[1].split()[0]


def incoming(body: dict[str, Any]) -> str | None:
    """The text of another agent's message, if the request answers one."""
    last = body["messages"][-1]
    if last["role"] == "system" and text_of(last).startswith(INCOMING):
        return text_of(last).split("] ", 1)[1]
    return None


def scripted(
    on_incoming: Callable[[dict[str, Any], str], Reply | None] | None = None,
) -> Callable[[dict[str, Any]], Reply]:
    def reply(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        said = incoming(body)
        if said is not None:
            special = on_incoming(body, said) if on_incoming else None
            return special or Reply(content=f"{agent_of(body)} heard: {said}")
        if last["role"] == "tool":
            return Reply(content=f"done: {text_of(last)}")
        if last["role"] == "user" and text_of(last).startswith("tool:"):
            name, _, arguments = text_of(last)[5:].partition(" ")
            return Reply(tool_calls=[(name, json.loads(arguments))])
        return echo_reply(body)

    return reply


def tool_id(client: letta_client.Letta, name: str) -> str:
    (tool,) = client.tools.list(name=name)
    assert tool.name == name and tool.tool_type == "letta_multi_agent_core"
    return tool.id


def new_agent(client: letta_client.Letta, *tools: str, tags: list[str] | None = None) -> Any:
    return client.agents.create(
        model="openai/gpt-4o-mini",
        embedding="openai/text-embedding-3-small",
        tool_ids=[tool_id(client, t) for t in tools],
        tags=tags or [],
    )


def held_pair(
    system: System, llm: FakeOpenAI, tool: str, answer: str
) -> tuple[threading.Event, letta_client.Letta, Any, Any]:
    """A sender with `tool` and a receiver whose `answer` waits until the test sets `held`
    (so the sender is caught waiting)."""
    held = threading.Event()
    llm.default_reply = scripted(lambda body, said: Reply(content=answer, release=held))
    client = system.client()
    return held, client, new_agent(client, tool), new_agent(client)


def call(client: letta_client.Letta, agent_id: str, tool: str, **arguments: Any) -> Any:
    return client.agents.messages.create(
        agent_id, messages=[{"role": "user", "content": f"tool:{tool} {json.dumps(arguments)}"}]
    )


def tool_return(response: Any) -> Any:
    (returned,) = [m for m in response.messages if m.message_type == "tool_return_message"]
    return returned


def listed(client: letta_client.Letta, agent_id: str) -> list[tuple[str, str]]:
    """The agent's default conversation after its system prompt: (type, text)."""
    items = client.agents.messages.list(agent_id, order="asc").items
    return [(str(m.message_type), getattr(m, "content", None) or "") for m in items[1:]]


async def logged(system: System, agent_id: str) -> list[tuple[int, Envelope[Any]]]:
    """The agent's events with their stream positions, as the log holds them now."""
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        sub = await nc.jetstream().subscribe(
            subjects.agent_subject(agent_id),
            stream=subjects.EVENTS_STREAM,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        out: list[tuple[int, Envelope[Any]]] = []
        while True:
            msg = await sub.next_msg(timeout=DEADLINE)
            out.append((msg.metadata.sequence.stream, decode(msg.data)))
            if msg.metadata.num_pending == 0:
                return out
    finally:
        await nc.close()


def counts(events: list[tuple[int, Envelope[Any]]]) -> dict[str, int]:
    """How many of each fact the events record (a run's end may carry its last answer)."""
    out: dict[str, int] = {}
    for _, e in events:
        for fact in facts(e.data):
            name = type(fact).__name__
            out[name] = out.get(name, 0) + 1
    return out


async def test_the_tools_are_listed_and_attach_by_id_by_name_or_all_at_once(
    system: System,
) -> None:
    client = system.client()
    ids = {name: tool_id(client, name) for name in (WAIT, NOTIFY, BROADCAST)}
    assert {t.name for t in client.tools.list() if t.id in ids.values()} == set(ids)
    # (letta-client 1.12 no longer names the flag; the 1.7 client Letta's tests use does)
    everything = client.agents.create(
        model="openai/gpt-4o-mini", extra_body={"include_multi_agent_tools": True}
    )
    assert {WAIT, NOTIFY, BROADCAST} <= {t.name for t in everything.tools}
    # Letta's default leaves them out.
    plain = client.agents.create(model="openai/gpt-4o-mini")
    assert not {WAIT, NOTIFY, BROADCAST} & {t.name for t in plain.tools}
    by_name = client.agents.create(model="openai/gpt-4o-mini", tools=[NOTIFY])
    assert NOTIFY in {t.name for t in by_name.tools}
    client.agents.tools.attach(ids[WAIT], agent_id=plain.id)
    assert WAIT in {t.name for t in client.agents.tools.list(plain.id)}


async def test_an_agent_waits_for_another_agents_reply(system: System, llm: FakeOpenAI) -> None:
    llm.default_reply = scripted()
    client = system.client()
    sender = new_agent(client, WAIT)
    receiver = new_agent(client)
    response = call(
        client, sender.id, WAIT, message="The secret is Banana", other_agent_id=receiver.id
    )
    returned = tool_return(response)
    heard = f"{receiver.id} heard: The secret is Banana\nthe secret is banana"
    assert returned.status == "success"
    # Letta's shape: the Python repr of {'agent_id': ..., 'response': [...]}.
    assert returned.tool_return == str({"agent_id": receiver.id, "response": [heard]})
    assert ast.literal_eval(returned.tool_return)["response"] == [heard]
    assert response.messages[-1].content == f"done: {returned.tool_return}"
    # The receiver was sent a system message naming the sender, and answered it.
    assert listed(client, receiver.id) == [
        (
            "system_message",
            f"[Incoming message from agent with ID '{sender.id}' - your response will be"
            " delivered to the sender] The secret is Banana\nthe secret is banana",
        ),
        ("assistant_message", heard),
    ]
    # Its run's id derives from the calling run, the tool call and the receiver.
    (tool_call,) = [m for m in response.messages if m.message_type == "tool_call_message"]
    (run,) = client.runs.list(agent_id=receiver.id)
    assert run.id == derived_id(
        "run", returned.run_id, tool_call.tool_call.tool_call_id, receiver.id
    )
    assert run.status == "completed"
    # The call was recorded before the receiver's run was accepted.
    requested = [s for s, e in await logged(system, sender.id) if e.type == "ToolCallRequested"]
    queued = [s for s, e in await logged(system, receiver.id) if e.type == "RunQueued"]
    assert len(requested) == len(queued) == 1 and requested[0] < queued[0]


async def test_an_async_message_returns_once_the_other_run_is_accepted(
    system: System, llm: FakeOpenAI
) -> None:
    held, client, sender, receiver = held_pair(system, llm, NOTIFY, "later")
    async with agent_events(system, receiver.id) as events:
        try:
            response = call(
                client, sender.id, NOTIFY, message="FYI: deploy at noon", other_agent_id=receiver.id
            )
            returned = tool_return(response)
            assert (returned.status, returned.tool_return) == (
                "success",
                "Successfully sent message",
            )
            # The sender's turn ended while the receiver's run had not.
            (run,) = client.runs.list(agent_id=receiver.id)
            assert run.status in ("created", "running")
        finally:
            held.set()
        await events.wait_for("RunCompleted")
        await projected(system, events.last_seq)
    assert client.runs.retrieve(run.id).status == "completed"
    assert listed(client, receiver.id) == [
        (
            "system_message",
            f"[Incoming message from agent with ID '{sender.id}' - this is a one-way"
            " notification; if you need to respond, use an agent-to-agent messaging tool if"
            " available] FYI: deploy at noon",
        ),
        ("assistant_message", "later"),
    ]


async def test_tags_choose_who_is_asked(system: System, llm: FakeOpenAI) -> None:
    llm.default_reply = scripted()
    client = system.client()
    mark = uuid.uuid4().hex[:8]  # tags of this test's own
    team, other = f"team-{mark}", f"other-{mark}"
    manager = new_agent(client, BROADCAST, tags=["worker", team])
    first = new_agent(client, tags=["worker", team])
    second = new_agent(client, tags=["worker", team, "senior"])
    outsider = new_agent(client, tags=["worker", other])
    untagged = new_agent(client)

    def asked(**tags: list[str]) -> list[Any]:
        returned = tool_return(call(client, manager.id, BROADCAST, message="roll call", **tags))
        assert returned.status == "success"
        value: list[Any] = ast.literal_eval(returned.tool_return)
        return value

    def answer(agent: Any) -> dict[str, Any]:
        return {"agent_id": agent.id, "response": [f"{agent.id} heard: roll call"]}

    # Every tag of match_all and one of match_some; never the sender.
    assert asked(match_all=["worker", team], match_some=[]) == [answer(first), answer(second)]
    assert asked(match_all=["worker"], match_some=["senior", other]) == [
        answer(second),
        answer(outsider),
    ]
    assert asked(match_all=[f"nobody-{mark}"], match_some=[]) == []
    assert asked(match_all=[], match_some=[other]) == [answer(outsider)]
    assert listed(client, untagged.id) == []
    assert [t for t, _ in listed(client, second.id)] == ["system_message", "assistant_message"] * 2


async def test_an_unknown_agent_is_the_tools_error(system: System, llm: FakeOpenAI) -> None:
    llm.default_reply = scripted()
    client = system.client()
    sender = new_agent(client, WAIT, NOTIFY)
    nobody = "agent-00000000-0000-4000-8000-000000000000"
    for tool in (WAIT, NOTIFY):
        response = call(client, sender.id, tool, message="hello?", other_agent_id=nobody)
        returned = tool_return(response)
        assert (returned.status, returned.tool_return) == ("error", f"Agent {nobody} not found")
        # The run goes on.
        assert response.messages[-1].content == f"done: Agent {nobody} not found"
        assert response.stop_reason.stop_reason == "end_turn"


async def test_an_agent_waiting_for_an_approval_takes_no_message(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = scripted()
    client = system.client()
    sender = new_agent(client, WAIT)
    receiver = client.agents.create(
        model="openai/gpt-4o-mini",
        tool_rules=[{"type": "requires_approval", "tool_name": "memory_insert"}],
    )
    asked = call(client, receiver.id, "memory_insert", label="human", new_string="Likes: chess")
    assert asked.stop_reason.stop_reason == "requires_approval"
    returned = tool_return(call(client, sender.id, WAIT, message="hi", other_agent_id=receiver.id))
    assert (returned.status, returned.tool_return) == (
        "error",
        f"the message could not be sent: agent {receiver.id} is waiting for approval on a tool"
        " call; it takes no new message until the pending request is approved or denied",
    )
    # Nothing was sent to it: its only run is the one that waits.
    assert [r.stop_reason for r in client.runs.list(agent_id=receiver.id)] == ["requires_approval"]


async def test_an_agent_cannot_wait_for_itself(system: System, llm: FakeOpenAI) -> None:
    llm.default_reply = scripted()
    client = system.client()
    sender = new_agent(client, WAIT)
    response = call(client, sender.id, WAIT, message="me?", other_agent_id=sender.id)
    returned = tool_return(response)
    assert returned.status == "error"
    assert "cannot wait for a reply from itself" in returned.tool_return
    assert response.stop_reason.stop_reason == "end_turn"
    # Nothing was sent: the sender ran once.
    assert len(list(client.runs.list(agent_id=sender.id))) == 1


async def test_an_agent_asked_cannot_wait_for_the_agent_waiting_for_it(
    system: System, llm: FakeOpenAI
) -> None:
    client = system.client()
    first = new_agent(client, WAIT)
    second = new_agent(client, WAIT)

    def ask_back(body: dict[str, Any], said: str) -> Reply | None:
        if agent_of(body) != second.id:
            return None
        return Reply(tool_calls=[(WAIT, {"message": "and you?", "other_agent_id": first.id})])

    llm.default_reply = scripted(ask_back)
    returned = tool_return(call(client, first.id, WAIT, message="hi", other_agent_id=second.id))
    # The second agent's call back was refused at once (it would have waited for the
    # first agent's run, which waits for it), and it answered with that.
    answer = ast.literal_eval(returned.tool_return)
    (said,) = answer["response"]
    assert said.startswith("done: ") and f"agent {first.id} is waiting for this agent" in said
    assert [r.status for r in client.runs.list(agent_id=first.id)] == ["completed"]


async def test_a_reply_that_takes_too_long_is_the_tools_error(
    system: System, llm: FakeOpenAI
) -> None:
    held, client, sender, receiver = held_pair(system, llm, WAIT, "too late")
    async with agent_events(system, receiver.id) as events:
        try:
            # (In a thread: a call of REPLY_TIMEOUT seconds on this loop stalled the event
            # subscription's heartbeats, and RunCompleted reached the test 20 s late.)
            response = await asyncio.to_thread(
                call, client, sender.id, WAIT, message="quick!", other_agent_id=receiver.id
            )
            (run,) = client.runs.list(agent_id=receiver.id)
            returned = tool_return(response)
            assert returned.status == "error"
            assert returned.tool_return.startswith(
                f"agent {receiver.id} did not reply within {REPLY_TIMEOUT}s; its run {run.id}"
                " goes on"
            )
            # The sender's run went on without the reply.
            assert response.stop_reason.stop_reason == "end_turn"
        finally:
            held.set()
        await events.wait_for("RunCompleted")
        await projected(system, events.last_seq)
    assert listed(client, receiver.id)[-1] == ("assistant_message", "too late")


async def test_a_caller_cancelled_while_waiting_stops_waiting(
    system: System, llm: FakeOpenAI
) -> None:
    held, client, sender, receiver = held_pair(system, llm, WAIT, "unheard")
    async with agent_events(system, receiver.id) as events:
        try:
            task = asyncio.create_task(
                asyncio.to_thread(
                    call, client, sender.id, WAIT, message="wait", other_agent_id=receiver.id
                )
            )
            await until(llm, lambda reqs: any(incoming(r) for r in reqs))
            client.agents.messages.cancel(sender.id)
            response = await asyncio.wait_for(task, DEADLINE)
            (run,) = client.runs.list(agent_id=receiver.id)
            # The sender's run ended cancelled well before the reply could time out...
            returned = tool_return(response)
            assert returned.status == "error"
            assert returned.tool_return == (
                f"the run was cancelled while waiting for agent {receiver.id}'s reply; its run"
                f" {run.id} goes on"
            )
            assert response.stop_reason.stop_reason == "cancelled"
        finally:
            held.set()
        # ...and the receiver's run was not the sender's to stop.
        await events.wait_for("RunCompleted")
        await projected(system, events.last_seq)
    assert client.runs.retrieve(run.id).status == "completed"


async def test_killed_while_waiting_the_reply_arrives_once(system: System, llm: FakeOpenAI) -> None:
    client = system.client()
    sender = new_agent(client, WAIT)
    receiver = new_agent(client)
    held = threading.Event()
    answers = iter([Reply(content="lost with the executor", release=held)])
    llm.default_reply = scripted(lambda body, said: next(answers, None))
    try:
        task = asyncio.create_task(
            asyncio.to_thread(
                call, client, sender.id, WAIT, message="still there?", other_agent_id=receiver.id
            )
        )
        # The sender waits: the receiver's model is answering.
        await until(llm, lambda reqs: any(incoming(r) for r in reqs))
        await kill_executors(system)
        response = await asyncio.wait_for(task, DEADLINE)
    finally:
        held.set()
    heard = f"{receiver.id} heard: still there?"
    returned = tool_return(response)
    assert returned.tool_return == str({"agent_id": receiver.id, "response": [heard]})
    # The receiver ran once (its unanswered step asked again), the sender's tool returned once.
    got = counts(await logged(system, receiver.id))
    assert (got["RunQueued"], got["RunStarted"], got["LLMResponded"], got["RunCompleted"]) == (
        1,
        1,
        1,
        1,
    )
    assert sum(1 for r in llm.requests if incoming(r)) == 2
    sent = counts(await logged(system, sender.id))
    assert (sent["ToolCallRequested"], sent["ToolReturned"], sent["RunCompleted"]) == (1, 1, 1)
    assert listed(client, receiver.id)[-1] == ("assistant_message", heard)
    assert [r.status for r in client.runs.list(agent_id=receiver.id)] == ["completed"]
