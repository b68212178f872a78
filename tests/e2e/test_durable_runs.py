"""Durable runs: kill -9 the executors at each point of a run; the run still finishes once.

Each test holds the run at a known point (the fake LLM holds its answer until
released, or the memory service is paused with SIGSTOP), kills every executor
replica with SIGKILL, and checks what the restarted executor made of the log:
no recorded LLM step asked again, no tool run twice, no message lost or doubled.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any

import nats
import pytest

from o_contracts import subjects
from o_contracts.envelope import Envelope, decode
from o_contracts.events import facts
from tests.e2e.conftest import System
from tests.e2e.support import agent_events, new_agent, on_subject, until
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply
from tests.servers import operator

pytestmark = pytest.mark.e2e
DEADLINE = 30.0


async def kill_executors(system: System) -> None:
    restarts = system.supervisor.restart_count("executor")
    pids = system.supervisor.pids("executor")
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    await asyncio.wait_for(
        system.supervisor.wait_for_restarts("executor", restarts + len(pids)), DEADLINE
    )


def send_later(system: System, agent_id: str, text: str) -> asyncio.Task[Any]:
    return asyncio.create_task(
        system.http.post(
            f"/v1/agents/{agent_id}/messages",
            json={"messages": [{"role": "user", "content": text}]},
        )
    )


async def finished(task: asyncio.Task[Any]) -> dict[str, Any]:
    response = await asyncio.wait_for(task, DEADLINE)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def history(system: System, agent_id: str) -> list[tuple[str, Any]]:
    """The default conversation after its system message."""
    rows = (
        await system.http.get(
            f"/v1/agents/{agent_id}/messages", params={"conversation_id": "default"}
        )
    ).json()
    assert rows[0]["message_type"] == "system_message"
    return [
        (m["message_type"], m.get("content") or m.get("tool_return") or m.get("tool_call"))
        for m in rows[1:]
    ]


async def human_block(system: System, agent_id: str) -> str:
    block = await system.http.get(f"/v1/agents/{agent_id}/core-memory/blocks/human")
    value: str = block.json()["value"]
    return value


def step_counts(events: list[Envelope[Any]]) -> dict[str, int]:
    """How many of each fact the events record (a run's end may carry its last answer)."""
    counts: dict[str, int] = {}
    for e in events:
        for fact in facts(e.data):
            name = type(fact).__name__
            counts[name] = counts.get(name, 0) + 1
    return counts


async def killed_between_answer_and_tool(
    system: System,
    llm: FakeOpenAI,
    events: Any,
    answered: threading.Event,
    task: asyncio.Task[Any],
) -> tuple[dict[str, Any], list[Envelope[Any]]]:
    """Kill the executors after the LLM's answer (a tool call) is recorded and before the
    tool has run; the run's reply once it finishes anyway, and what was recorded.

    The prompt was read from memory; memory is then paused so the tool cannot finish,
    the LLM answers, and the executors die between the two.
    """
    memory = system.supervisor.pids("memory")
    try:
        await until(llm, lambda reqs: len(reqs) == 1)
        for pid in memory:
            os.kill(pid, signal.SIGSTOP)
        answered.set()
        await events.wait_for("ToolCallRequested")
        await kill_executors(system)
        for pid in memory:
            os.kill(pid, signal.SIGCONT)
        result = await finished(task)
        return result, await events.drain()
    finally:
        answered.set()
        for pid in memory:
            os.kill(pid, signal.SIGCONT)


async def tea_killed_between_answer_and_tool(
    system: System, llm: FakeOpenAI, agent: dict[str, Any], answered: threading.Event
) -> tuple[dict[str, Any], list[Envelope[Any]]]:
    """ "I like tea" sent, the executors killed between the model's tool call and the tool
    (killed_between_answer_and_tool); the reply, checked to be the call, its result and the
    answer, and what was recorded."""
    async with agent_events(system, agent["id"]) as events:
        task = send_later(system, agent["id"], "I like tea")
        result, recorded = await killed_between_answer_and_tool(system, llm, events, answered, task)
    assert [m["message_type"] for m in result["messages"]] == [
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    return result, recorded


async def test_killed_during_an_llm_call_the_step_is_asked_again_once(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    held = threading.Event()
    llm.push(Reply(content="lost with the executor", release=held), Reply(content="after crash"))
    try:
        async with agent_events(system, agent["id"]) as events:
            task = send_later(system, agent["id"], "hello")
            await until(llm, lambda reqs: len(reqs) == 1)
            await kill_executors(system)
            result = await finished(task)
            recorded = await events.drain()
    finally:
        held.set()
    assert [(m["message_type"], m["content"]) for m in result["messages"]] == [
        ("assistant_message", "after crash")
    ]
    # The unanswered step was not recorded, so it was asked again: exactly once more.
    assert len(llm.requests) == 2
    assert llm.requests[1]["messages"][1:] == llm.requests[0]["messages"][1:]
    counts = step_counts(recorded)
    assert (counts["RunStarted"], counts["LLMResponded"], counts["RunCompleted"]) == (1, 1, 1)
    assert await history(system, agent["id"]) == [
        ("user_message", "hello"),
        ("assistant_message", "after crash"),
    ]


async def test_killed_after_the_llm_answered_the_tool_runs_once(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    answered = threading.Event()
    llm.push(
        Reply(
            tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})],
            release=answered,
        ),
        Reply(content="Noted."),
    )
    result, recorded = await tea_killed_between_answer_and_tool(system, llm, agent, answered)
    assert result["messages"][1]["status"] == "success"
    assert await human_block(system, agent["id"]) == "Name: Sam\nLikes: tea"
    # The recorded step was not asked again: one request per step.
    assert len(llm.requests) == 2
    counts = step_counts(recorded)
    assert (counts["LLMResponded"], counts["ToolCallRequested"], counts["ToolReturned"]) == (
        2,
        1,
        1,
    )
    kinds = [k for k, _ in await history(system, agent["id"])]
    assert kinds == [
        "user_message",
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]


async def test_a_refused_memory_edit_in_doubt_is_asked_again_and_its_reason_told(
    system: System, llm: FakeOpenAI
) -> None:
    # The restarted executor finds no effect of the edit in the log, sends the same command
    # again and waits for the memory service to have handled it (the memory consumer's ack
    # floor, which the executor's NATS identity must be allowed to read): handled without
    # an effect is a refusal, and the edit is asked again for its reason. (Found by the chaos
    # suite: the executor's role lacked that read, and such a run was retried for ever.)
    agent = await new_agent(system)
    answered = threading.Event()
    edit = {"label": "nowhere", "new_string": "Likes: tea"}
    llm.push(
        Reply(tool_calls=[("memory_insert", edit)], release=answered),
        Reply(content="That block does not exist."),
    )
    result, recorded = await tea_killed_between_answer_and_tool(system, llm, agent, answered)
    returned = result["messages"][1]
    assert returned["status"] == "error"
    assert "nowhere" in returned["tool_return"]
    assert await human_block(system, agent["id"]) == "Name: Sam"
    assert len(llm.requests) == 2
    counts = step_counts(recorded)
    assert (counts["ToolCallRequested"], counts["ToolReturned"], counts["RunCompleted"]) == (
        1,
        1,
        1,
    )


async def test_an_archival_insert_in_doubt_is_asked_again_and_stored_once(
    system: System, llm: FakeOpenAI
) -> None:
    # The insert's command has an id derived from the call, and the memory service answers
    # a repeat from the passage it made: the restarted executor asks again rather than
    # telling the model the outcome is unknown. (Found by the chaos suite: a nats-server
    # restart during the insert made the run resume and give up on it, the memory lost.)
    agent = await new_agent(
        system, embedding="openai/text-embedding-3-small", tools=["archival_memory_insert"]
    )
    answered = threading.Event()
    llm.push(
        Reply(
            tool_calls=[("archival_memory_insert", {"content": "Sam likes green tea"})],
            release=answered,
        )
    )

    def rating(body: dict[str, Any]) -> bool:
        return "Rating:" in str(body["messages"][-1]["content"])

    # The memory service asks the agent's model to rate the memory, unless the restarted
    # executors are not serving yet (then the rating is the default): answered by kind.
    llm.default_reply = lambda body: Reply(content="6" if rating(body) else "Noted.")
    result, recorded = await tea_killed_between_answer_and_tool(system, llm, agent, answered)
    returned = result["messages"][1]
    assert returned["status"] == "success", returned["tool_return"]
    rows = (await system.http.get(f"/v1/agents/{agent['id']}/archival-memory")).json()
    assert [r["text"] for r in rows] == ["Sam likes green tea"]
    # The run's two steps were each asked once, the rating at most once.
    assert len([b for b in llm.requests if not rating(b)]) == 2
    assert len([b for b in llm.requests if rating(b)]) <= 1
    counts = step_counts(recorded)
    assert (counts["ToolCallRequested"], counts["ToolReturned"], counts["RunCompleted"]) == (
        1,
        1,
        1,
    )


async def test_killed_after_the_tool_ran_neither_is_repeated(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    second_step = threading.Event()
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Has: a cat"})]),
        Reply(content="lost with the executor", release=second_step),
        Reply(content="Cat noted."),
    )
    try:
        async with agent_events(system, agent["id"]) as events:
            task = send_later(system, agent["id"], "I have a cat")
            await events.wait_for("ToolReturned")
            await until(llm, lambda reqs: len(reqs) == 2)
            await kill_executors(system)
            result = await finished(task)
            recorded = await events.drain()
    finally:
        second_step.set()
    assert [m["message_type"] for m in result["messages"]] == [
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    assert result["messages"][-1]["content"] == "Cat noted."
    assert await human_block(system, agent["id"]) == "Name: Sam\nHas: a cat"
    # Step 0 once; step 1 twice (its first answer died with the executor).
    assert len(llm.requests) == 3
    assert llm.requests[2]["messages"][1:] == llm.requests[1]["messages"][1:]
    counts = step_counts(recorded)
    assert (counts["LLMResponded"], counts["ToolReturned"], counts["RunCompleted"]) == (2, 1, 1)


def user_text(body: dict[str, Any]) -> str:
    last = [m for m in body["messages"] if m["role"] == "user"][-1]
    return str(last["content"])


async def two_agents_a_first_held(
    system: System, llm: FakeOpenAI
) -> tuple[dict[str, Any], dict[str, Any], threading.Event]:
    """Agents a and b; the model holds its answer to "a-1" until the event is set, and
    echoes everything else."""
    a = await new_agent(system)
    b = await new_agent(system)
    first_held = threading.Event()

    def reply(body: dict[str, Any]) -> Reply:
        if user_text(body) == "a-1":
            return Reply(content="a-1 done", release=first_held)
        return echo_reply(body)

    llm.default_reply = reply
    return a, b, first_held


async def test_one_agent_runs_in_arrival_order_while_others_run_in_parallel(
    system: System, llm: FakeOpenAI
) -> None:
    a, b, first_held = await two_agents_a_first_held(system, llm)

    def asked(text: str, requests: list[dict[str, Any]] | None = None) -> bool:
        return any(user_text(r) == text for r in (llm.requests if requests is None else requests))

    try:
        async with agent_events(system, a["id"]) as events:
            a_tasks = [send_later(system, a["id"], "a-1")]
            await until(llm, lambda reqs: asked("a-1", reqs))
            a_tasks += [send_later(system, a["id"], f"a-{i}") for i in (2, 3, 4)]
            # Another agent is not held up by a's running turn...
            b_result = await finished(send_later(system, b["id"], "b-1"))
            assert b_result["messages"][0]["content"] == "echo: b-1"
            # ...while a's later messages wait for it, on whichever replica they landed.
            assert not any(asked(f"a-{i}") for i in (2, 3, 4))
            first_held.set()
            results = [await finished(t) for t in a_tasks]
            recorded = await events.drain()
    finally:
        first_held.set()
    assert [r["messages"][0]["content"] for r in results] == [
        "a-1 done",
        "echo: a-2",
        "echo: a-3",
        "echo: a-4",
    ]
    # In the log, a's runs never overlap...
    runs = [e for e in recorded if e.type in ("RunStarted", "RunCompleted")]
    assert [e.type for e in runs] == ["RunStarted", "RunCompleted"] * 4
    assert all(runs[i].data.run_id == runs[i + 1].data.run_id for i in range(0, 8, 2))
    # ...and they ran in the order their commands arrived.
    ran = [e.data.messages[0].content for e in runs[::2]]
    assert ran == await arrival_order(system, a["id"])
    last = [r for r in llm.requests if user_text(r) == ran[-1]][-1]
    assert [m["content"] for m in last["messages"] if m["role"] == "user"] == ran


async def test_many_runs_waiting_for_one_agent_hold_up_no_other_agent(
    system: System, llm: FakeOpenAI
) -> None:
    """Twenty runs of one agent wait behind its first, which is held; another agent's
    message still runs at once. (A waiting run's command goes back to the stream with a
    delay, and JetStream counts it as pending: a bound of the consumer's pending commands
    at its handlers' number let sixteen waiting runs of one agent stop every agent.)"""
    a, b, first_held = await two_agents_a_first_held(system, llm)
    run_ids = []
    try:
        first = send_later(system, a["id"], "a-1")
        await until(llm, lambda reqs: any(user_text(r) == "a-1" for r in reqs))
        for i in range(2, 22):
            queued = await system.http.post(
                f"/v1/agents/{a['id']}/messages/async",
                json={"messages": [{"role": "user", "content": f"a-{i}"}]},
            )
            assert queued.status_code == 200, queued.text
            run_ids.append(queued.json()["id"])
        b_result = await finished(send_later(system, b["id"], "b-1"))
        assert b_result["messages"][0]["content"] == "echo: b-1"
        assert not first_held.is_set()
    finally:
        first_held.set()
    await finished(first)
    async with agent_events(system, a["id"]) as events:
        await events.wait_until(
            lambda _: (
                set(run_ids) <= {e.data.run_id for e in events.seen if e.type == "RunCompleted"}
            ),
            DEADLINE * 2,
        )


async def arrival_order(system: System, agent_id: str) -> list[str]:
    """The user texts of the agent's StartRun commands, in commands-stream order."""
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        commands = await on_subject(
            nc, subjects.executor_command_subject(agent_id), subjects.COMMANDS_STREAM
        )
        return [decode(raw).data.messages[0].content for _, raw in commands]
    finally:
        await nc.close()


async def test_runs_waiting_their_turn_leave_no_consumers_behind(
    system: System, llm: FakeOpenAI
) -> None:
    # Each run that waited for its agent's turn used to watch the run queue's KV
    # key with a consumer the server kept 5 minutes: at 1000 consumers on the
    # bucket's stream every run failed (chaos suite, 7 minutes of load).
    agent = await new_agent(system)
    held = threading.Event()
    llm.push(Reply(content="first", release=held))
    url = f"/v1/agents/{agent['id']}/messages/async"
    run_ids = []
    try:
        for i in range(8):
            response = await system.http.post(
                url, json={"messages": [{"role": "user", "content": f"m{i}"}]}
            )
            run_ids.append(response.json()["id"])
        await until(llm, lambda reqs: len(reqs) == 1)  # the others wait their turn
    finally:
        held.set()
    async with asyncio.timeout(DEADLINE):
        while True:
            runs = [(await system.http.get(f"/v1/runs/{r}")).json() for r in run_ids]
            if all(r["status"] == "completed" for r in runs):
                break
            await asyncio.sleep(0.05)
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        info = await nc.jetstream().stream_info("KV_o_executor_runs")
    finally:
        await nc.close()
    assert info.state.consumer_count == 0


async def test_a_conversation_run_killed_after_the_llm_answered_finishes_once(
    system: System, llm: FakeOpenAI
) -> None:
    """The same guarantee in a named conversation (its own subject and run queue)."""
    agent = await new_agent(system)
    created = await system.http.post("/v1/conversations/", params={"agent_id": agent["id"]})
    conversation = created.json()["id"]
    answered = threading.Event()
    llm.push(
        Reply(
            tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})],
            release=answered,
        ),
        Reply(content="Noted."),
        Reply(content="And again."),
    )
    url = f"/v1/conversations/{conversation}/messages"
    async with agent_events(system, agent["id"], conversation) as events:
        body = {"messages": [{"role": "user", "content": "I like tea"}], "streaming": False}
        task = asyncio.create_task(system.http.post(url, json=body))
        result, recorded = await killed_between_answer_and_tool(system, llm, events, answered, task)
    assert [m["message_type"] for m in result["messages"]] == [
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    assert await human_block(system, agent["id"]) == "Name: Sam\nLikes: tea"
    counts = step_counts(recorded)
    assert (counts["RunQueued"], counts["RunStarted"], counts["RunCompleted"]) == (1, 1, 1)
    assert (counts["LLMResponded"], counts["ToolCallRequested"], counts["ToolReturned"]) == (
        2,
        1,
        1,
    )
    # The conversation takes its next message (its turn was handed on once).
    again = await system.http.post(
        url, json={"messages": [{"role": "user", "content": "more"}], "streaming": False}
    )
    assert again.status_code == 200, again.text
    listed = (await system.http.get(url, params={"order": "asc"})).json()
    assert [m["message_type"] for m in listed] == [
        "system_message",
        "user_message",
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
        "user_message",
        "assistant_message",
    ]
    # None of it is in the agent's default conversation.
    assert await history(system, agent["id"]) == []
