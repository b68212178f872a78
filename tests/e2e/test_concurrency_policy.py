"""A second message while a run is in flight, under each concurrency policy (issue 22).

Through the official SDK (`concurrency` travels as `extra_body`: an O extension
the SDK does not know). The first run is held on a scripted LLM reply that the
test releases, so the second message always arrives mid-run; tests wait for
LLM requests and logged events, never for time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import letta_client
import nats
import nats.js.errors
import pytest
from nats.js.api import DeliverPolicy

from o_contracts import subjects
from o_contracts.envelope import Envelope, decode
from tests.e2e.conftest import System
from tests.e2e.support import (
    AgentEvents,
    agent_events,
    caught_up,
    event_types,
    new_agent,
    new_conversation,
    parse_sse,
    until,
)
from tests.e2e.test_exactly_once import connected, publish_again
from tests.e2e.test_operations import snapshot
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.servers import operator

pytestmark = pytest.mark.e2e

SEARCH = Reply(tool_calls=[("conversation_search", {"query": "tea"})])


def seen(request: dict[str, Any]) -> list[tuple[str, str]]:
    """What the model was sent after the system prompt: (role, text or the tool called)."""
    out = []
    for m in request["messages"][1:]:
        if m.get("tool_calls"):
            out.append((m["role"], "call " + m["tool_calls"][0]["function"]["name"]))
        elif m["role"] == "tool":
            out.append(("tool", "result"))
        else:
            out.append((m["role"], m["content"]))
    return out


FIRST_TURN_SO_FAR = [
    ("user", "first"),
    ("assistant", "call conversation_search"),
    ("tool", "result"),
]


def said(response: Any) -> list[str]:
    return [m.content for m in response.messages if m.message_type == "assistant_message"]


def sent(
    client: letta_client.Letta, agent_id: str, text: str, policy: str | None = None, **extra: Any
) -> asyncio.Task[Any]:
    """A message sent through the SDK in the background (it blocks until answered)."""
    body = {"concurrency": policy} if policy else None
    message = {"role": "user", "content": text, **extra}
    return asyncio.create_task(
        asyncio.to_thread(
            client.agents.messages.create, agent_id, messages=[message], extra_body=body
        )
    )


async def steering(
    client: letta_client.Letta, llm: FakeOpenAI, events: AgentEvents, agent_id: str, *replies: Reply
) -> tuple[asyncio.Task[Any], asyncio.Task[Any]]:
    """Send "first" (the model's `replies` scripted, the first held by the test), then, once
    its first step is in flight, "second" to steer it: both requests, once the steer is
    asked for."""
    llm.push(*replies)
    first = sent(client, agent_id, "first")
    await until(llm, lambda reqs: len(reqs) == 1)
    second = sent(client, agent_id, "second", "steer")
    await events.wait_for("RunSteerRequested")
    return first, second


@contextmanager
def held() -> Iterator[threading.Event]:
    """A scripted reply held until set (set at the end whatever happens: no thread waits on)."""
    release = threading.Event()
    try:
        yield release
    finally:
        release.set()


@asynccontextmanager
async def commands(system: System, agent_id: str) -> AsyncIterator[AgentEvents]:
    """The agent's commands to the executor (its default conversation's), from the start."""
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        sub = await nc.jetstream().subscribe(
            subjects.executor_command_subject(agent_id),
            stream=subjects.COMMANDS_STREAM,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        yield AgentEvents(sub)
    finally:
        await nc.close()


def starts(text: str) -> Callable[[Envelope[Any]], bool]:
    """Whether a command starts a run on `text`."""
    return lambda e: bool(getattr(e.data, "messages", None)) and e.data.messages[0].content == text


async def history(system: System, agent_id: str) -> list[tuple[str, Any]]:
    rows = (
        await system.http.get(
            f"/v1/agents/{agent_id}/messages", params={"conversation_id": "default"}
        )
    ).json()
    return [
        (m["message_type"], m.get("content") or (m.get("tool_call") or {}).get("name"))
        for m in rows
        if m["message_type"] not in ("system_message", "tool_return_message")
    ]


async def runs_of(system: System, agent_id: str) -> list[dict[str, Any]]:
    listed = await system.http.get("/v1/runs/", params={"agent_id": agent_id, "order": "asc"})
    assert listed.status_code == 200, listed.text
    runs: list[dict[str, Any]] = listed.json()
    return runs


async def test_enqueue_runs_the_second_message_after_the_first_with_its_whole_turn(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    client = system.client()
    async with commands(system, agent["id"]) as sent_commands:
        with held() as release:
            llm.push(SEARCH, Reply(content="first done", release=release), Reply(content="second"))
            first = sent(client, agent["id"], "first")
            await until(llm, lambda reqs: len(reqs) == 2)
            second = sent(client, agent["id"], "second", "enqueue")
            await sent_commands.wait_until(starts("second"))  # queued behind the first
            release.set()
            assert said(await first) == ["first done"]
            assert said(await second) == ["second"]
    assert seen(llm.requests[2]) == [
        *FIRST_TURN_SO_FAR,
        ("assistant", "first done"),
        ("user", "second"),
    ]
    assert [r["stop_reason"] for r in await runs_of(system, agent["id"])] == [
        "end_turn",
        "end_turn",
    ]


async def test_reject_answers_letta_409_and_the_same_otids_follow_the_run_in_flight(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    client = system.client()
    with held() as release:
        llm.push(Reply(content="first done", release=release))
        first = sent(client, agent["id"], "first", "reject", otid="otid-reject-first")
        await until(llm, lambda reqs: len(reqs) == 1)
        with pytest.raises(letta_client.ConflictError) as refused:
            client.agents.messages.create(
                agent["id"],
                messages=[{"role": "user", "content": "second"}],
                extra_body={"concurrency": "reject"},
            )
        # The same request again (its otid) is that request: it follows the run in flight.
        again = sent(client, agent["id"], "first", "reject", otid="otid-reject-first")
        release.set()
        answers = [await first, await again]
    busy = refused.value.body
    (run,) = await runs_of(system, agent["id"])
    assert busy == {
        "detail": f"Cannot send a new message: Another request (run_id={run['id']}) is"
        " currently being processed for this conversation. Please wait for it to complete.",
        "run_id": run["id"],
    }
    assert [said(a) for a in answers] == [["first done"], ["first done"]]
    assert len(llm.requests) == 1
    assert await history(system, agent["id"]) == [
        ("user_message", "first"),
        ("assistant_message", "first done"),
    ]


async def test_interrupt_cancels_the_run_at_its_next_safe_point_and_starts_on_its_context(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    client = system.client()
    with held() as release:
        llm.push(SEARCH, Reply(content="never recorded", release=release), Reply(content="second"))
        first = sent(client, agent["id"], "first")
        await until(llm, lambda reqs: len(reqs) == 2)  # its second step is in flight
        second = sent(client, agent["id"], "second", "interrupt")
        interrupted, answer = await first, await second
    assert interrupted.stop_reason.stop_reason == "cancelled"
    assert said(answer) == ["second"]
    # The new run saw the first run's turn as it stood: its call and result, no answer.
    assert seen(llm.requests[2]) == [*FIRST_TURN_SO_FAR, ("user", "second")]
    assert await history(system, agent["id"]) == [
        ("user_message", "first"),
        ("tool_call_message", "conversation_search"),
        ("user_message", "second"),
        ("assistant_message", "second"),
    ]
    runs = await runs_of(system, agent["id"])
    assert [(r["status"], r["stop_reason"]) for r in runs] == [
        ("cancelled", "cancelled"),
        ("completed", "end_turn"),
    ]
    assert runs[0]["metadata"] == {
        "run_type": "send_message",
        "interrupted_by": runs[1]["id"],
        "rolled_back": False,
    }


async def test_rollback_removes_the_interrupted_run_from_context_and_listing(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    client = system.client()
    with held() as release:
        llm.push(SEARCH, Reply(content="never recorded", release=release), Reply(content="second"))
        first = sent(client, agent["id"], "first")
        await until(llm, lambda reqs: len(reqs) == 2)
        second = sent(client, agent["id"], "second", "rollback")
        interrupted, answer = await first, await second
    assert interrupted.stop_reason.stop_reason == "cancelled"
    assert said(answer) == ["second"]
    # As if the first message had never been sent.
    assert seen(llm.requests[2]) == [("user", "second")]
    assert await history(system, agent["id"]) == [
        ("user_message", "second"),
        ("assistant_message", "second"),
    ]
    first_run, second_run = await runs_of(system, agent["id"])
    assert first_run["stop_reason"] == "cancelled"
    assert first_run["metadata"]["rolled_back"] is True
    assert first_run["metadata"]["interrupted_by"] == second_run["id"]
    # The log keeps them; the run's own messages still show what it did.
    own = (await system.http.get(f"/v1/runs/{first_run['id']}/messages")).json()
    assert [m["message_type"] for m in own] == [
        "user_message",
        "tool_call_message",
        "tool_return_message",
    ]
    context = client.agents.retrieve(agent["id"]).message_ids or []
    assert not {m["id"] for m in own} & set(context)
    async with connected(system) as nc:
        kinds = [k for _, k in await event_types(nc, subjects.agent_subject(agent["id"]))]
    # Rolled back once its run had stopped, before the new run started.
    i = kinds.index("RunRolledBack")
    assert kinds[i - 1] == "RunCompleted" and kinds[i + 1] == "RunStarted"
    assert kinds.count("RunRolledBack") == 1


async def test_steer_adds_the_message_to_the_run_before_its_next_model_call(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    client = system.client()
    async with agent_events(system, agent["id"]) as events:
        with held() as release:
            first, second = await steering(
                client,
                llm,
                events,
                agent["id"],
                Reply(tool_calls=SEARCH.tool_calls, release=release),
                Reply(content="both"),
            )
            release.set()
            whole, steered = await first, await second
        recorded = await events.drain()
    # The second message joined the run after its tool call, before it asked again.
    assert seen(llm.requests[1]) == [*FIRST_TURN_SO_FAR, ("user", "second")]
    assert len(llm.requests) == 2
    assert said(whole) == ["both"]
    # The steering request is answered by what the run did once it took the message.
    assert said(steered) == ["both"]
    (run,) = await runs_of(system, agent["id"])
    assert steered.usage.run_ids == [run["id"]] and run["stop_reason"] == "end_turn"
    assert await history(system, agent["id"]) == [
        ("user_message", "first"),
        ("tool_call_message", "conversation_search"),
        ("user_message", "second"),
        ("assistant_message", "both"),
    ]
    (taken,) = [e for e in recorded if e.type == "RunSteered"]
    assert (taken.data.run_id, taken.data.step_number) == (run["id"], 1)
    # The request's own run had nothing left to do: it recorded nothing.
    (request,) = [e for e in recorded if e.type == "RunSteerRequested"]
    assert request.data.steer_run_id not in {getattr(e.data, "run_id", None) for e in recorded}


async def test_steer_that_comes_too_late_runs_the_message_on_its_own(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    client = system.client()
    async with agent_events(system, agent["id"]) as events:
        with held() as release:
            first, second = await steering(
                client,
                llm,
                events,
                agent["id"],
                Reply(content="first done", release=release),
                Reply(content="second"),
            )
            release.set()
            done, answer = await first, await second
    assert said(done) == ["first done"] and said(answer) == ["second"]
    # Never lost: run as the next turn.
    assert seen(llm.requests[1]) == [
        ("user", "first"),
        ("assistant", "first done"),
        ("user", "second"),
    ]
    runs = await runs_of(system, agent["id"])
    assert [r["stop_reason"] for r in runs] == ["end_turn", "end_turn"]
    assert answer.usage.run_ids == [runs[1]["id"]]


async def test_steer_streamed_on_a_conversation_streams_the_run_that_took_it(
    system: System, llm: FakeOpenAI
) -> None:
    agent, _client, conversation = await new_conversation(system)
    url = f"/v1/conversations/{conversation.id}/messages"
    async with agent_events(system, agent["id"], conversation.id) as events:
        with held() as release:
            llm.push(Reply(tool_calls=SEARCH.tool_calls, release=release), Reply(content="both"))
            first = asyncio.create_task(
                system.http.post(url, json={"messages": [{"role": "user", "content": "first"}]})
            )
            await until(llm, lambda reqs: len(reqs) == 1)
            body = {"messages": [{"role": "user", "content": "second"}], "concurrency": "steer"}
            second = asyncio.create_task(system.http.post(url, json=body))
            await events.wait_for("RunSteerRequested")
            release.set()
            streamed = [parse_sse((await task).text) for task in (first, second)]
    run_id = streamed[0][0][1]["run_id"]
    kinds = [(d["message_type"], d.get("run_id")) for _, d in streamed[1][:-1]]
    # Only what the run did after taking the message: its answer, then how it ended.
    assert kinds == [
        ("assistant_message", run_id),
        ("stop_reason", None),
        ("usage_statistics", None),
    ]
    assert streamed[1][-1] == (None, "[DONE]")


async def test_the_agent_default_applies_unless_the_request_names_a_policy(
    system: System, llm: FakeOpenAI
) -> None:
    client = system.client()
    agent = client.agents.create(
        model="openai/gpt-4o-mini",
        memory_blocks=[{"label": "human", "value": "Name: Sam"}],
        extra_body={"concurrency": "reject"},
    )
    shown = (await system.http.get(f"/v1/agents/{agent.id}")).json()
    assert shown["concurrency"] == "reject"
    async with commands(system, agent.id) as sent_commands:
        with held() as release:
            llm.push(Reply(content="first done", release=release), Reply(content="queued"))
            first = sent(client, agent.id, "first")
            await until(llm, lambda reqs: len(reqs) == 1)
            # The agent's default refuses it on the agent-level route ...
            with pytest.raises(letta_client.ConflictError):
                client.agents.messages.create(agent.id, messages=[{"role": "user", "content": "x"}])
            # ... the request's own policy wins.
            queued = sent(client, agent.id, "second", "enqueue")
            await sent_commands.wait_until(starts("second"))
            release.set()
            assert said(await first) == ["first done"] and said(await queued) == ["queued"]
    updated = await system.http.patch(f"/v1/agents/{agent.id}", json={"concurrency": "steer"})
    assert updated.status_code == 200 and updated.json()["concurrency"] == "steer"
    # null sets it back to none: the route's (Letta's) behaviour.
    cleared = await system.http.patch(f"/v1/agents/{agent.id}", json={"concurrency": None})
    assert cleared.status_code == 200 and cleared.json()["concurrency"] is None


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/agents/{id}/messages", {"messages": [{"role": "user", "content": "x"}]}),
        (
            "POST",
            "/v1/agents/{id}/messages/async",
            {"messages": [{"role": "user", "content": "x"}]},
        ),
        ("PATCH", "/v1/agents/{id}", {}),
        ("POST", "/v1/agents/", {"model": "openai/gpt-4o-mini"}),
    ],
)
async def test_an_unknown_policy_is_refused_naming_the_field(
    system: System, method: str, path: str, body: dict[str, Any]
) -> None:
    agent = await new_agent(system)
    response = await system.http.request(
        method, path.format(id=agent["id"]), json={**body, "concurrency": "politely"}
    )
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "concurrency"]
    assert len(await runs_of(system, agent["id"])) == 0


async def test_steering_and_rollback_runs_delivered_again_change_nothing(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    client = system.client()
    async with agent_events(system, agent["id"]) as events:
        with held() as release:
            first, second = await steering(
                client,
                llm,
                events,
                agent["id"],
                Reply(tool_calls=SEARCH.tool_calls, release=release),
                Reply(content="both"),
            )
            release.set()
            await first, await second
        with held() as release:
            llm.push(SEARCH, Reply(content="never", release=release), Reply(content="rolled"))
            third = sent(client, agent["id"], "third")
            await until(llm, lambda reqs: len(reqs) == 4)
            fourth = sent(client, agent["id"], "fourth", "rollback")
            await third, await fourth
    asked = len(llm.requests)
    subject = subjects.executor_command_subject(agent["id"])
    async with connected(system) as nc:
        before = await event_types(nc, subjects.agent_subject(agent["id"]))
        steered_command, rolling_back = await commands_of(nc, subject, ("second", "fourth"))
        # (The stream holds each once; a late redelivery comes under another Nats-Msg-Id.)
        taken = await publish_again(nc, subject, steered_command)
        rolled = await publish_again(nc, subject, rolling_back)
        after = await event_types(nc, subjects.agent_subject(agent["id"]))
    assert after == before
    assert len(llm.requests) == asked
    runs = await runs_of(system, agent["id"])
    assert taken.ok and taken.result == {"stop_reason": "end_turn", "steered_into": runs[0]["id"]}
    assert rolled.ok and rolled.result == {"stop_reason": "end_turn"}
    assert [k for _, k in before].count("RunRolledBack") == 1


async def commands_of(nc: Any, subject: str, texts: tuple[str, ...]) -> list[Envelope[Any]]:
    """The StartRun commands on `subject` whose input is each of `texts`, in that order."""
    found: dict[str, Envelope[Any]] = {}
    seq = 1
    while True:
        try:
            msg = await nc.jetstream().get_msg(
                subjects.COMMANDS_STREAM, seq=seq, subject=subject, next=True
            )
        except nats.js.errors.NotFoundError:
            return [found[t] for t in texts]
        envelope = decode(msg.data or b"")
        messages = getattr(envelope.data, "messages", [])
        if messages and messages[0].content in texts:
            found[messages[0].content] = envelope
        seq = int(msg.seq or 0) + 1


async def test_the_projections_rebuilt_from_the_log_show_the_same_policies_outcomes(
    system: System, llm: FakeOpenAI
) -> None:
    # (After the tests above: interrupted, rolled-back and steered runs, agents' defaults.)
    client = system.client()
    agent = await new_agent(system, concurrency="interrupt")
    with held() as release:
        llm.push(SEARCH, Reply(content="never", release=release), Reply(content="kept"))
        first = sent(client, agent["id"], "first")
        await until(llm, lambda reqs: len(reqs) == 2)
        second = sent(client, agent["id"], "second", "rollback")
        await first, await second
    await caught_up(system)
    before = await snapshot(system.env["DATABASE_URL"])
    assert any(r["rolled_back"] for r in before["messages"])
    assert any(r["interrupted_by"] for r in before["runs"])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "o_devtools.rebuild",
        "runs",
        "agents",
        env=system.env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert await snapshot(system.env["DATABASE_URL"]) == before


async def kill_executors(system: System) -> None:
    restarts = system.supervisor.restart_count("executor")
    pids = system.supervisor.pids("executor")
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    await asyncio.wait_for(
        system.supervisor.wait_for_restarts("executor", restarts + len(pids)), 30.0
    )


async def test_a_steered_run_whose_executors_die_takes_the_message_exactly_once(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    client = system.client()
    async with agent_events(system, agent["id"]) as events:
        with held() as release:
            # The first answer goes to executors that die; the run asks that step again.
            first, second = await steering(
                client,
                llm,
                events,
                agent["id"],
                Reply(tool_calls=SEARCH.tool_calls, release=release),
                SEARCH,
                Reply(content="both"),
            )
            await kill_executors(system)
        whole, steered = await first, await second
        recorded = await events.drain()
    assert said(whole) == ["both"] and said(steered) == ["both"]
    (run,) = await runs_of(system, agent["id"])
    assert run["stop_reason"] == "end_turn"
    assert steered.usage.run_ids == [run["id"]]
    counts = step_counts(recorded)
    assert counts["RunSteered"] == 1
    assert counts["RunCompleted"] == 1
    # The message is in the conversation once, and the model saw it once.
    assert [h for h in await history(system, agent["id"]) if h[0] == "user_message"] == [
        ("user_message", "first"),
        ("user_message", "second"),
    ]
    assert seen(llm.requests[-1]).count(("user", "second")) == 1


async def test_an_interrupt_whose_executors_die_cancels_once_and_runs_the_new_message_once(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    client = system.client()
    async with agent_events(system, agent["id"]) as events:
        with held() as release:
            llm.push(SEARCH, Reply(content="never recorded", release=release))
            llm.push(Reply(content="second"))
            first = sent(client, agent["id"], "first")
            await until(llm, lambda reqs: len(reqs) == 2)  # its second step is in flight
            second = sent(client, agent["id"], "second", "interrupt")
            await events.wait_until(
                lambda e: e.type == "RunQueued" and bool(getattr(e.data, "interrupts", None))
            )
            await kill_executors(system)
        interrupted, answer = await first, await second
        recorded = await events.drain()
    assert interrupted.stop_reason.stop_reason == "cancelled"
    assert said(answer) == ["second"]
    runs = await runs_of(system, agent["id"])
    assert [(r["status"], r["stop_reason"]) for r in runs] == [
        ("cancelled", "cancelled"),
        ("completed", "end_turn"),
    ]
    assert step_counts(recorded)["RunCompleted"] == 2
    # The new run asked the model once ("never recorded" went to the dead executors).
    asked = [r for r in llm.requests if ("user", "second") in seen(r)]
    assert len(asked) == 1
    assert await history(system, agent["id"]) == [
        ("user_message", "first"),
        ("tool_call_message", "conversation_search"),
        ("user_message", "second"),
        ("assistant_message", "second"),
    ]


def step_counts(events: list[Envelope[Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in events:
        counts[e.type] = counts.get(e.type, 0) + 1
    return counts
