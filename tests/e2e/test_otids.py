"""Letta's otid on every message a client gets, by every path (POST, step and token
streams, async runs, history, a run's messages), through the official SDK: the user message
keeps the client's otid, what the agent says gets one derived from its message, and a
message read later carries the otid it was streamed with."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from letta_client import Letta

from tests.e2e.conftest import System
from tests.e2e.support import new_agent
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


def search_then_answer(llm: FakeOpenAI) -> None:
    llm.push(
        Reply(tool_calls=[("conversation_search", {"query": "tea"})]),
        Reply(content="You said you like tea."),
    )


def ask(otid: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "What do I like?", "otid": otid}]


Seen = dict[tuple[str, str], str]  # (message id, message type) -> otid


def otids(messages: list[Any]) -> Seen:
    """Each message's otid, by id and type; every chunk of one message carries the same."""
    seen: Seen = {}
    for m in messages:
        if m.message_type in ("stop_reason", "usage_statistics", "ping"):
            continue
        assert m.otid, m
        assert seen.setdefault((m.id, m.message_type), m.otid) == m.otid, m
    return seen


def check_reply(seen: Seen) -> None:
    """A letta_v1 agent's search-then-answer turn: each API message is the first (and only)
    its stored message renders into, so each otid ends in 0 (Letta's clients check it)."""
    kinds = sorted(kind for _, kind in seen)
    assert kinds == ["assistant_message", "tool_call_message", "tool_return_message"], kinds
    assert all(otid[-1] == "0" for otid in seen.values()), seen


def every_path(client: Letta, agent_id: str, llm: FakeOpenAI) -> None:
    history_seen: Seen = {}

    search_then_answer(llm)
    reply = client.agents.messages.create(agent_id, messages=ask("otid-post"))
    seen = otids(reply.messages)
    check_reply(seen)
    history_seen |= seen

    search_then_answer(llm)
    steps = list(client.agents.messages.stream(agent_id, messages=ask("otid-steps")))
    seen = otids(steps)
    check_reply(seen)
    history_seen |= seen

    search_then_answer(llm)
    tokens = list(
        client.agents.messages.stream(agent_id, messages=ask("otid-tokens"), stream_tokens=True)
    )
    seen = otids(tokens)
    check_reply(seen)
    history_seen |= seen

    search_then_answer(llm)
    run = client.agents.messages.create_async(agent_id, messages=ask("otid-async"))
    # An async run is a background run: its stream follows it to its end.
    followed = otids(list(client.runs.messages.stream(run.id)))
    check_reply(followed)
    run_messages = otids(list(client.runs.messages.list(run.id)))
    assert run_messages[next(k for k in run_messages if k[1] == "user_message")] == "otid-async"
    assert {k: v for k, v in run_messages.items() if k[1] != "user_message"} == followed
    history_seen |= followed

    # Read later, every message carries the otid it had when it was returned or streamed,
    # and each user message the client's.
    runs = {reply.messages[0].run_id, steps[0].run_id, tokens[0].run_id, run.id}
    listed = client.agents.messages.list(agent_id, limit=100)
    history = otids([m for m in listed if m.run_id in runs])
    users = sorted(v for k, v in history.items() if k[1] == "user_message")
    assert users == ["otid-async", "otid-post", "otid-steps", "otid-tokens"]
    assert {k: v for k, v in history.items() if k[1] != "user_message"} == history_seen


async def test_every_message_carries_a_stable_otid_by_every_path(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    await asyncio.to_thread(every_path, system.client(), agent["id"], llm)


def typed_input(client: Letta, agent_id: str) -> None:
    reply = client.agents.messages.create(agent_id, input="Hello there")
    assert reply.messages[0].otid
    listed = list(client.agents.messages.list(agent_id, limit=100))
    run_id = reply.messages[0].run_id
    user = next(m for m in listed if m.message_type == "user_message" and m.run_id == run_id)
    # `input` carries no otid: the server gives the user message one, the same each read.
    assert user.otid
    again = list(client.agents.messages.list(agent_id, limit=100))
    assert next(m for m in again if m.id == user.id).otid == user.otid


async def test_a_message_sent_as_input_gets_an_otid(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="Hi."))
    await asyncio.to_thread(typed_input, system.client(), agent["id"])


def reply_tool_shown(client: Letta, agent_id: str) -> None:
    plain = client.agents.messages.create(
        agent_id,
        messages=[{"role": "user", "content": "hi", "otid": "otid-plain"}],
        use_assistant_message=False,
    )
    kinds = [m.message_type for m in plain.messages]
    assert kinds == ["tool_call_message", "tool_return_message"], kinds
    call, result = plain.messages
    assert call.tool_call.name == "send_message"
    assert call.otid and call.otid[-1] == "0" and result.otid and result.otid[-1] == "0"

    # The history shows it either way, the same messages with the same otids.
    def of_run(messages: Any) -> list[Any]:
        return [m for m in messages if m.run_id == call.run_id]

    raw = of_run(client.agents.messages.list(agent_id, use_assistant_message=False))
    assert [m.message_type for m in raw] == ["user_message", *kinds]
    assert raw[0].otid == "otid-plain"
    assert [(m.id, m.otid) for m in raw[1:]] == [(call.id, call.otid), (result.id, result.otid)]
    spoken = of_run(client.agents.messages.list(agent_id))
    assert [m.message_type for m in spoken] == ["user_message", "assistant_message"]
    assert spoken[1].content == "Hi from memgpt" and spoken[1].id == call.id

    # Streamed, the same.
    streamed = [
        m
        for m in client.agents.messages.stream(
            agent_id,
            messages=[{"role": "user", "content": "again", "otid": "otid-plain-2"}],
            use_assistant_message=False,
        )
        if m.message_type not in ("stop_reason", "usage_statistics", "ping")
    ]
    assert [m.message_type for m in streamed] == kinds


async def test_without_assistant_message_the_reply_is_its_tool_call_and_return(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system, agent_type="memgpt_v2_agent")
    for _ in range(2):
        llm.push(Reply(tool_calls=[("send_message", {"message": "Hi from memgpt"})]))
    await asyncio.to_thread(reply_tool_shown, system.client(), agent["id"])


def asked_again(client: Letta, agent_id: str, llm: FakeOpenAI) -> None:
    """Letta's test_invoke_tool_after_turning_off_requires_approval: the same message, under
    the same otid, sent again as a new turn, streamed this time. Only the same request sent
    the same way is a retry."""
    question = [{"role": "user", "content": "What is the code?", "otid": "otid-asked-twice"}]
    llm.push(Reply(content="First answer."), Reply(content="Second answer."))
    first = client.agents.messages.create(agent_id, messages=question)
    again = list(client.agents.messages.stream(agent_id, messages=question, stream_tokens=True))
    said = "".join(m.content for m in again if m.message_type == "assistant_message")
    assert said == "Second answer."
    assert again[0].run_id != first.messages[0].run_id
    # That stream, sent again as it was, is a retry: its run, replayed; the model is not asked.
    replayed = list(client.agents.messages.stream(agent_id, messages=question, stream_tokens=True))
    assert "".join(m.content for m in replayed if m.message_type == "assistant_message") == said
    assert {getattr(m, "run_id", None) for m in replayed} - {None} == {again[0].run_id}
    assert len(llm.requests) == 2
    history = [
        (m.message_type, m.otid)
        for m in client.agents.messages.list(agent_id, order="asc")
        if m.message_type in ("user_message", "assistant_message")
    ]
    assert [kind for kind, _ in history] == ["user_message", "assistant_message"] * 2
    assert history[0][1] == history[2][1] == "otid-asked-twice"


async def test_a_message_sent_again_as_another_request_is_a_new_turn(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    await asyncio.to_thread(asked_again, system.client(), agent["id"], llm)
