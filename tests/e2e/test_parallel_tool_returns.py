"""One step's tool results are one tool_return_message with every result in `tool_returns`,
as Letta shows them (its test_parallel_tool_calling), wherever a client sees messages: the
run's reply, the agent's and the conversation's lists (one id, one unit of `limit`, cursors
that skip all of it), a run's messages, a message by id, step, token and background streams
and their resumption; also the answers to an approval with the calls held beside them."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from tests.e2e.conftest import System
from tests.e2e.support import merged, new_agent, parse_sse
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

SEARCHES = [("conversation_search", {"query": q}) for q in ("tea", "cake", "jam")]


def three_searches(llm: FakeOpenAI, answer: str = "Found all three.") -> None:
    llm.push(Reply(tool_calls=SEARCHES), Reply(content=answer))


def kinds(messages: list[dict[str, Any]]) -> list[str]:
    return [m["message_type"] for m in messages]


def the_group(messages: list[dict[str, Any]]) -> dict[str, Any]:
    (group,) = [m for m in messages if m["message_type"] == "tool_return_message"]
    return group


def assert_one_for_the_calls(group: dict[str, Any], call: dict[str, Any]) -> None:
    """The group answers each of the step's calls, in order, the first in the old fields."""
    call_ids = [c["tool_call_id"] for c in call["tool_calls"]]
    assert len(call_ids) == 3
    assert [r["tool_call_id"] for r in group["tool_returns"]] == call_ids
    assert [(r["type"], r["status"]) for r in group["tool_returns"]] == [("tool", "success")] * 3
    first = group["tool_returns"][0]
    assert (group["tool_call_id"], group["tool_return"], group["status"]) == (
        first["tool_call_id"],
        first["tool_return"],
        "success",
    )


async def get(system: System, path: str, **params: Any) -> list[dict[str, Any]]:
    response = await system.http.get(path, params=params)
    assert response.status_code == 200, response.text
    body: list[dict[str, Any]] = response.json()
    return body


async def test_a_steps_results_are_one_message_in_the_reply_and_every_list(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    three_searches(llm)
    reply = await system.http.post(
        f"/v1/agents/{agent['id']}/messages",
        json={"messages": [{"role": "user", "content": "find tea, cake and jam"}]},
    )
    assert reply.status_code == 200, reply.text
    said = reply.json()["messages"]
    assert kinds(said) == ["tool_call_message", "tool_return_message", "assistant_message"]
    call, group = said[0], said[1]
    assert_one_for_the_calls(group, call)
    run_id = group["run_id"]

    # The agent's history: the same message, with its id and otid.
    url = f"/v1/agents/{agent['id']}/messages"
    listed = await get(system, url)
    assert kinds(listed) == [
        "system_message",
        "user_message",
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    assert listed[3] == group
    # `limit` counts it once, and never takes part of it.
    assert [m["id"] for m in await get(system, url, limit=2)] == [group["id"], said[2]["id"]]
    after_call = await get(system, url, after=call["id"], limit=1, order="asc")
    assert after_call == [group]
    # Cursors that name it leave all of it out.
    assert [m["id"] for m in await get(system, url, after=group["id"])] == [said[2]["id"]]
    before = await get(system, url, before=group["id"], limit=1)
    assert [m["message_type"] for m in before] == ["tool_call_message"]

    # The conversation routes page the default conversation alike (their cursors follow
    # the order).
    conv = "/v1/conversations/default/messages"
    newest = await get(system, conv, agent_id=agent["id"], limit=2)
    assert [m["id"] for m in newest] == [said[2]["id"], group["id"]]
    assert newest[1] == group
    older = await get(system, conv, agent_id=agent["id"], after=group["id"], limit=1)
    assert [m["id"] for m in older] == [call["id"]]

    # A run's messages, and the message by its id.
    runs = f"/v1/runs/{run_id}/messages"
    in_run = await get(system, runs, limit=3)
    assert kinds(in_run) == ["user_message", "tool_call_message", "tool_return_message"]
    assert in_run[2] == group
    assert kinds(await get(system, runs, after=group["id"])) == ["assistant_message"]
    newest_first = await get(system, runs, order="desc", limit=2)
    assert [m["id"] for m in newest_first] == [said[2]["id"], group["id"]]
    assert newest_first[1]["tool_returns"] == group["tool_returns"]
    assert await get(system, f"/v1/messages/{group['id']}") == [group]


async def test_a_steps_results_stream_as_one_message_in_steps_and_in_tokens(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    url = f"/v1/agents/{agent['id']}/messages/stream"
    for tokens in (False, True):
        three_searches(llm, f"Found them (tokens: {tokens}).")
        streamed = await system.http.post(
            url,
            json={
                "messages": [{"role": "user", "content": "find tea, cake and jam"}],
                "stream_tokens": tokens,
            },
        )
        assert streamed.status_code == 200, streamed.text
        chunks = [data for _, data in merged(parse_sse(streamed.text)) if isinstance(data, dict)]
        assert kinds(chunks) == [
            "tool_call_message",
            "tool_return_message",
            "assistant_message",
            "stop_reason",
            "usage_statistics",
        ]
        assert_one_for_the_calls(chunks[1], chunks[0])
        # What the stream sent is what the history shows.
        listed = await get(system, f"/v1/agents/{agent['id']}/messages", limit=2)
        assert listed[0] == the_group(chunks) | {"date": listed[0]["date"]}


@pytest.mark.parametrize("tokens", [False, True])
async def test_a_stream_sends_a_steps_results_before_the_model_is_asked_again(
    system: System, llm: FakeOpenAI, tokens: bool
) -> None:
    """Sent as soon as the step's last result is recorded: the model's next answer is held
    until the client has the group."""
    agent = await new_agent(system)
    release = threading.Event()
    llm.push(Reply(tool_calls=SEARCHES), Reply(content="All found.", release=release))
    seen: list[dict[str, Any]] = []
    try:
        async with system.http.stream(
            "POST",
            f"/v1/agents/{agent['id']}/messages/stream",
            json={
                "messages": [{"role": "user", "content": "find tea, cake and jam"}],
                "stream_tokens": tokens,
            },
        ) as response:
            lines = response.aiter_lines()
            async with asyncio.timeout(30):
                async for line in lines:
                    if line.startswith("data: {"):
                        seen.append(json.loads(line.removeprefix("data: ")))
                        if seen[-1]["message_type"] == "tool_return_message":
                            break
                # (The group came while the model's next answer was still held.)
                release.set()
                async for line in lines:
                    if line.startswith("data: {"):
                        seen.append(json.loads(line.removeprefix("data: ")))
    finally:
        release.set()
    group = the_group(seen)
    assert len(group["tool_returns"]) == 3
    said = "".join(m["content"] for m in seen if m["message_type"] == "assistant_message")
    assert said == "All found."


async def test_a_resumed_background_stream_numbers_the_group_once(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    three_searches(llm)
    streamed = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/stream",
        json={
            "messages": [{"role": "user", "content": "find tea, cake and jam"}],
            "background": True,
        },
    )
    chunks = [data for _, data in parse_sse(streamed.text) if isinstance(data, dict)]
    assert [(c["message_type"], c["seq_id"]) for c in chunks] == [
        ("tool_call_message", 1),
        ("tool_return_message", 2),
        ("assistant_message", 3),
        ("stop_reason", 4),
        ("usage_statistics", 5),
    ]
    resumed = await system.http.post(
        f"/v1/runs/{chunks[0]['run_id']}/stream", json={"starting_after": 1}
    )
    again = [data for _, data in parse_sse(resumed.text) if isinstance(data, dict)]
    assert [(c["message_type"], c["seq_id"]) for c in again][:2] == [
        ("tool_return_message", 2),
        ("assistant_message", 3),
    ]
    assert again[0]["tool_returns"] == chunks[1]["tool_returns"]
    assert again[0]["id"] == chunks[1]["id"]


async def test_the_answers_to_an_approval_and_the_held_call_are_one_message(
    system: System, llm: FakeOpenAI
) -> None:
    """Letta's test_parallel_tool_calling: a call held beside three that wait (approved,
    denied, a client tool's result) gives four results in one message."""
    agent = await new_agent(
        system, tool_rules=[{"type": "requires_approval", "tool_name": "memory_insert"}]
    )
    clock = {
        "name": "get_local_time",
        "description": "The user's local time.",
        "parameters": {"type": "object", "properties": {}},
    }
    inserts = [
        ("memory_insert", {"label": "human", "new_string": f"Likes: {thing}"})
        for thing in ("chess", "go")
    ]
    llm.push(
        Reply(tool_calls=[SEARCHES[0], *inserts, ("get_local_time", {})]),
        Reply(content="Saved chess, not go; it is noon."),
    )
    asked = await system.http.post(
        f"/v1/agents/{agent['id']}/messages",
        json={"input": "remember chess and go; what time is it?", "client_tools": [clock]},
    )
    held, request = asked.json()["messages"]
    assert (held["message_type"], request["message_type"]) == (
        "tool_call_message",
        "approval_request_message",
    )
    approve, deny, client = (c["tool_call_id"] for c in request["tool_calls"])
    answers = [
        {"type": "approval", "tool_call_id": approve, "approve": True},
        {"type": "approval", "tool_call_id": deny, "approve": False},
        {"type": "tool", "tool_call_id": client, "tool_return": "12:00", "status": "success"},
    ]
    # Answered in a background stream: the results are sent once all four are in.
    streamed = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/stream",
        json={
            "messages": [{"type": "approval", "approvals": answers}],
            "client_tools": [clock],
            "background": True,
        },
    )
    chunks = [data for _, data in parse_sse(streamed.text) if isinstance(data, dict)]
    assert kinds(chunks) == [
        "approval_response_message",
        "tool_return_message",
        "assistant_message",
        "stop_reason",
        "usage_statistics",
    ]
    group = chunks[1]
    assert [(r["tool_call_id"], r["status"]) for r in group["tool_returns"]] == [
        (held["tool_call"]["tool_call_id"], "success"),
        (approve, "success"),
        (deny, "error"),
        (client, "success"),
    ]
    assert group["tool_returns"][3]["tool_return"] == "12:00"
    listed = await get(system, f"/v1/agents/{agent['id']}/messages", limit=3)
    assert kinds(listed) == [
        "approval_response_message",
        "tool_return_message",
        "assistant_message",
    ]
    assert listed[1]["tool_returns"] == group["tool_returns"]
    assert listed[1]["id"] == group["id"]
