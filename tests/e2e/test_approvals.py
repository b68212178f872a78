"""Approvals (requires_approval rule) and client tools answered by a tool_return."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from letta_client import BadRequestError

from o_contracts.approval_rules import WAITING_FOR_APPROVAL
from tests.e2e.conftest import System
from tests.e2e.support import new_agent, parse_sse, send, until
from tests.e2e.test_concurrency_policy import commands, held, starts
from tests.e2e.test_schedules import DEADLINE, create, runs_finished, schedule_events
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

INSERT = ("memory_insert", {"label": "human", "new_string": "Likes: chess"})


async def answer(system: System, agent_id: str, **approval: Any) -> Any:
    return await system.http.post(
        f"/v1/agents/{agent_id}/messages",
        json={"messages": [{"type": "approval", "approvals": [approval]}]},
    )


async def waiting_to_insert(
    system: System, llm: FakeOpenAI, *after: Reply
) -> tuple[dict[str, Any], str]:
    """An agent whose memory_insert needs approval, asked to use it (it now waits);
    `after`: the model's replies once it is answered. The agent and the waiting call."""
    agent = await new_agent(
        system, tool_rules=[{"type": "requires_approval", "tool_name": "memory_insert"}]
    )
    llm.push(Reply(tool_calls=[INSERT]), *after)
    asked = await send(system, agent["id"], "I like chess")
    call_id: str = asked["messages"][0]["tool_call"]["tool_call_id"]
    return agent, call_id


async def human(system: System, agent_id: str) -> str:
    block = await system.http.get(f"/v1/agents/{agent_id}/core-memory/blocks/human")
    value: str = block.json()["value"]
    return value


async def test_approve_then_the_tool_runs_and_the_turn_goes_on(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(
        system, tool_rules=[{"type": "requires_approval", "tool_name": "memory_insert"}]
    )
    llm.push(Reply(tool_calls=[INSERT]), Reply(content="Saved."))
    asked = await send(system, agent["id"], "I like chess")
    assert asked["stop_reason"]["stop_reason"] == "requires_approval"
    (request,) = asked["messages"]
    assert request["message_type"] == "approval_request_message"
    call_id = request["tool_call"]["tool_call_id"]
    assert await human(system, agent["id"]) == "Name: Sam"
    # The agent shows what it waits for (AgentState.pending_approval).
    pending = (await system.http.get(f"/v1/agents/{agent['id']}")).json()["pending_approval"]
    assert pending["message_type"] == "approval_request_message"
    assert pending["tool_call"]["tool_call_id"] == call_id

    # While it waits, a normal message is refused with the pending call's id...
    busy = await system.http.post(f"/v1/agents/{agent['id']}/messages", json={"input": "hello?"})
    assert busy.status_code == 409
    detail = busy.json()["detail"]
    assert detail["code"] == "PENDING_APPROVAL"
    assert detail["pending_request_id"] == request["id"]
    assert detail["pending_tool_call_ids"] == [call_id]
    # Letta's words, which its clients match on.
    assert "Please approve or deny the pending request before continuing" in detail["message"]
    # ...and so is an answer to a call that is not waiting.
    wrong = await answer(system, agent["id"], tool_call_id="call_nope", approve=True)
    assert wrong.status_code == 400 and call_id in wrong.json()["detail"]
    assert wrong.json()["detail"].startswith("Invalid tool call IDs")

    done = await answer(system, agent["id"], tool_call_id=call_id, approve=True)
    assert done.status_code == 200, done.text
    body = done.json()
    assert [m["message_type"] for m in body["messages"]] == [
        "tool_return_message",
        "assistant_message",
    ]
    assert body["messages"][0]["status"] == "success"
    assert body["stop_reason"]["stop_reason"] == "end_turn"
    assert await human(system, agent["id"]) == "Name: Sam\nLikes: chess"
    answered = (await system.http.get(f"/v1/agents/{agent['id']}")).json()
    assert answered["pending_approval"] is None
    # The run that asked is completed (Letta: requires_approval counts as completed).
    run = (await system.http.get(f"/v1/runs/{asked['usage']['run_ids'][0]}")).json()
    assert run["status"] == "completed" and run["stop_reason"] == "requires_approval"
    listed = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    assert [m["message_type"] for m in listed] == [
        "system_message",
        "user_message",
        "approval_request_message",
        "approval_response_message",
        "tool_return_message",
        "assistant_message",
    ]
    # The answer shows where it was given, as Letta's approval message.
    given = listed[3]
    assert given["approve"] is True and given["approval_request_id"] == call_id
    assert given["approvals"] == [
        {"type": "approval", "tool_call_id": call_id, "approve": True, "reason": None}
    ]


async def test_deny_with_a_reason(system: System, llm: FakeOpenAI) -> None:
    agent, call_id = await waiting_to_insert(system, llm, Reply(content="Understood, I won't."))
    done = await answer(system, agent["id"], tool_call_id=call_id, approve=False, reason="not now")
    ret = done.json()["messages"][0]
    assert ret["status"] == "error"
    assert ret["tool_return"] == "Error: request to call tool denied. User reason: not now"
    assert await human(system, agent["id"]) == "Name: Sam"
    tool_msg = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert tool_msg == {"role": "tool", "tool_call_id": call_id, "content": ret["tool_return"]}


async def test_a_client_tool_is_answered_by_a_tool_return(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    clock = {
        "name": "get_local_time",
        "description": "The user's local time.",
        "parameters": {"type": "object", "properties": {}},
    }
    llm.push(Reply(tool_calls=[("get_local_time", {})]), Reply(content="It is noon."))
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages",
        json={"input": "what time is it?", "client_tools": [clock]},
    )
    asked = response.json()
    assert asked["stop_reason"]["stop_reason"] == "requires_approval"
    assert "get_local_time" in {t["function"]["name"] for t in llm.requests[-1]["tools"]}
    call_id = asked["messages"][0]["tool_call"]["tool_call_id"]
    done = await system.http.post(
        f"/v1/agents/{agent['id']}/messages",
        json={
            "messages": [
                {
                    "type": "approval",
                    "approvals": [
                        {
                            "type": "tool",
                            "tool_call_id": call_id,
                            "tool_return": "12:00",
                            "status": "success",
                        }
                    ],
                }
            ],
            "client_tools": [clock],
        },
    )
    body = done.json()
    assert body["messages"][0]["message_type"] == "tool_return_message"
    assert body["messages"][0]["tool_return"] == "12:00"
    assert body["messages"][-1]["content"] == "It is noon."
    assert llm.requests[-1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call_id,
        "content": "12:00",
    }


async def test_calls_that_need_no_approval_wait_with_those_that_do(
    system: System, llm: FakeOpenAI
) -> None:
    # As in Letta: of one response's calls only memory_insert needs approval;
    # memory_replace is held (shown as a tool call) and runs once it is answered.
    agent = await new_agent(
        system, tool_rules=[{"type": "requires_approval", "tool_name": "memory_insert"}]
    )
    replace = ("memory_replace", {"label": "human", "old_string": "Sam", "new_string": "Sam K."})
    llm.push(Reply(tool_calls=[replace, INSERT]), Reply(content="Done both."))
    asked = await send(system, agent["id"], "I am Sam K. and I like chess")
    assert asked["stop_reason"]["stop_reason"] == "requires_approval"
    held, request = asked["messages"]
    assert held["message_type"] == "tool_call_message"
    assert [c["name"] for c in held["tool_calls"]] == ["memory_replace"]
    assert request["message_type"] == "approval_request_message"
    assert [c["name"] for c in request["tool_calls"]] == ["memory_insert"]
    assert await human(system, agent["id"]) == "Name: Sam"  # nothing ran yet
    busy = await system.http.post(f"/v1/agents/{agent['id']}/messages", json={"input": "well?"})
    assert busy.json()["detail"]["pending_tool_call_ids"] == [request["tool_call"]["tool_call_id"]]
    # The held call needs no answer (and may not be given one).
    held_id = held["tool_call"]["tool_call_id"]
    wrong = await answer(system, agent["id"], tool_call_id=held_id, approve=True)
    assert wrong.status_code == 400, wrong.text

    done = await answer(
        system, agent["id"], tool_call_id=request["tool_call"]["tool_call_id"], approve=True
    )
    assert done.status_code == 200, done.text
    # Both results, of one step, as one message (as Letta stores and shows them).
    (shown,) = [m for m in done.json()["messages"] if m["message_type"] == "tool_return_message"]
    returns = shown["tool_returns"]
    assert [(r["tool_call_id"], r["status"]) for r in returns] == [
        (held_id, "success"),
        (request["tool_call"]["tool_call_id"], "success"),
    ]
    assert await human(system, agent["id"]) == "Name: Sam K.\nLikes: chess"
    # The LLM saw both results before answering.
    results = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [r["tool_call_id"] for r in returns]


async def test_every_waiting_call_needs_an_answer(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(
        system, tool_rules=[{"type": "requires_approval", "tool_name": "memory_insert"}]
    )
    second = ("memory_insert", {"label": "human", "new_string": "Likes: go"})
    llm.push(Reply(tool_calls=[INSERT, second]), Reply(content="Saved."))
    asked = await send(system, agent["id"], "I like chess and go")
    (request,) = asked["messages"]
    first_id, second_id = (c["tool_call_id"] for c in request["tool_calls"])
    partial = await answer(system, agent["id"], tool_call_id=first_id, approve=True)
    assert partial.status_code == 400
    assert second_id in partial.json()["detail"]
    assert partial.json()["detail"].startswith("Invalid tool call IDs")
    assert await human(system, agent["id"]) == "Name: Sam"  # the refusal changed nothing


async def test_an_answer_with_nothing_waiting_is_refused_in_lettas_words(system: System) -> None:
    agent = await new_agent(system)
    client = system.client()
    before = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    approval = {"type": "approval", "approve": True, "tool_call_id": "call_nothing"}

    def send_answer() -> None:
        client.agents.messages.create(
            agent["id"], messages=[{"type": "approval", "approvals": [approval]}]
        )

    with pytest.raises(BadRequestError, match="No tool call is currently awaiting approval"):
        await asyncio.to_thread(send_answer)
    after = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    assert after == before  # nothing was recorded


async def test_an_answer_given_again_goes_on_with_a_keep_alive(
    system: System, llm: FakeOpenAI
) -> None:
    agent, call_id = await waiting_to_insert(
        system, llm, Reply(content="Done."), Reply(content="Still here.")
    )
    first = await answer(system, agent["id"], tool_call_id=call_id, approve=True)
    assert first.status_code == 200
    # A client that lost the reply sends the same answer again (Letta's retry): the
    # tool does not run twice; the agent goes on after a keep-alive message.
    again = await answer(system, agent["id"], tool_call_id=call_id, approve=True)
    assert again.status_code == 200, again.text
    assert [m["content"] for m in again.json()["messages"]] == ["Still here."]
    assert await human(system, agent["id"]) == "Name: Sam\nLikes: chess"
    sent = llm.requests[-1]["messages"][-1]
    assert sent["role"] == "user" and "keep-alive" in sent["content"]
    # An answer to a call the agent never made is still refused.
    stranger = await answer(system, agent["id"], tool_call_id="call_stranger", approve=True)
    assert stranger.status_code == 400


async def test_a_streamed_answer_comes_back_first(system: System, llm: FakeOpenAI) -> None:
    agent, call_id = await waiting_to_insert(system, llm, Reply(content="Done."))
    streamed = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/stream",
        json={
            "messages": [
                {
                    "type": "approval",
                    "approvals": [{"type": "approval", "tool_call_id": call_id, "approve": True}],
                }
            ]
        },
    )
    chunks = [data for _, data in parse_sse(streamed.text) if isinstance(data, dict)]
    types = [c["message_type"] for c in chunks]
    assert types == [
        "approval_response_message",
        "tool_return_message",
        "assistant_message",
        "stop_reason",
        "usage_statistics",
    ]
    # The same message (id) the history shows.
    listed = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    shown = next(m for m in listed if m["message_type"] == "approval_response_message")
    assert chunks[0]["id"] == shown["id"] and chunks[0]["approval_request_id"] == call_id


async def test_a_token_streamed_answer_is_not_echoed(system: System, llm: FakeOpenAI) -> None:
    """Letta's token stream leaves the answer out: the tool's result comes first."""
    agent, call_id = await waiting_to_insert(system, llm, Reply(content="Done."))
    approvals = [{"type": "approval", "tool_call_id": call_id, "approve": True}]
    streamed = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/stream",
        json={"messages": [{"type": "approval", "approvals": approvals}], "stream_tokens": True},
    )
    chunks = [data for _, data in parse_sse(streamed.text) if isinstance(data, dict)]
    assert chunks[0]["message_type"] == "tool_return_message"


async def test_a_scheduled_message_to_an_agent_waiting_for_approval_fails_in_lettas_words(
    system: System, llm: FakeOpenAI
) -> None:
    """Every run's input meets the agent's pending calls in the executor (Letta checks it in
    its loop), not only a request's in the gateway: a schedule's run, queued when it fired,
    ends failed without asking the model, and the call still waits."""
    agent, call_id = await waiting_to_insert(system, llm, Reply(content="Saved."))
    asked = len(llm.requests)
    at = datetime.now(UTC) + timedelta(seconds=1.5)
    schedule = await create(system, agent["id"], at=at.isoformat())
    async with schedule_events(system, schedule["id"]) as events:
        fire = await events.wait_until(lambda e: e.type == "ScheduleFired", DEADLINE)
    run_id = fire.data.run_id
    agent_events = await runs_finished(system, agent["id"], {run_id})
    ran = [e for e in agent_events if getattr(e.data, "run_id", None) == run_id]
    assert [e.type for e in ran] == ["RunQueued", "RunCompleted"]
    assert ran[1].data.stop_reason == "error" and ran[1].data.error == WAITING_FOR_APPROVAL
    assert len(llm.requests) == asked
    run = (await system.http.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["stop_reason"]) == ("failed", "error")
    pending = (await system.http.get(f"/v1/agents/{agent['id']}")).json()["pending_approval"]
    assert pending["tool_call"]["tool_call_id"] == call_id

    done = await answer(system, agent["id"], tool_call_id=call_id, approve=True)
    assert done.status_code == 200, done.text
    assert await human(system, agent["id"]) == "Name: Sam\nLikes: chess"


async def test_a_streamed_message_refused_when_its_turn_comes_ends_its_stream_with_the_refusal(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(
        system, tool_rules=[{"type": "requires_approval", "tool_name": "memory_insert"}]
    )
    async with commands(system, agent["id"]) as sent_commands:
        with held() as release:
            llm.push(Reply(tool_calls=[INSERT], release=release))
            first = asyncio.create_task(send(system, agent["id"], "I like chess"))
            await until(llm, lambda reqs: len(reqs) == 1)
            # Nothing waits for approval yet: the gateway admits the streamed message, and
            # it is queued behind the run in flight, which then asks for an approval.
            streamed = asyncio.create_task(
                system.http.post(
                    f"/v1/agents/{agent['id']}/messages/stream",
                    json={"messages": [{"role": "user", "content": "hello?"}]},
                    timeout=DEADLINE,
                )
            )
            await sent_commands.wait_until(starts("hello?"))
            release.set()
            asked = await first
    call_id = asked["messages"][0]["tool_call"]["tool_call_id"]
    # Its turn comes, the executor refuses it (nothing recorded), and the stream ends with
    # the refusal at once, in the API's status and detail.
    # (Bounded: the stream's pings keep its connection busy, so a client's read timeout
    # would never fire; a stream left waiting for its run would go on for ten minutes.)
    response = await asyncio.wait_for(streamed, DEADLINE)
    frames = parse_sse(response.text)
    assert frames[-1] == (None, "[DONE]")
    event, error = frames[-2]
    assert event == "error" and error["message_type"] == "error_message"
    assert error["status"] == 409 and error["detail"]["code"] == "PENDING_APPROVAL"
    assert error["detail"]["pending_tool_call_ids"] == [call_id]
    assert error["message"] == error["detail"]["message"]
    # The call still waits, and is answered as usual.
    llm.push(Reply(content="Saved."))
    done = await answer(system, agent["id"], tool_call_id=call_id, approve=True)
    assert done.status_code == 200, done.text
    assert await human(system, agent["id"]) == "Name: Sam\nLikes: chess"
