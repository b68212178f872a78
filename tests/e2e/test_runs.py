"""Runs and steps: recorded as events, projected, served in Letta's shapes; async and cancel."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from tests.e2e.conftest import System
from tests.e2e.support import agent_events, new_agent, projected, send, until
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


async def test_a_run_its_messages_steps_and_usage(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(
        Reply(
            tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: jazz"})],
            prompt_tokens=100,
            completion_tokens=10,
        ),
        Reply(content="Noted.", prompt_tokens=130, completion_tokens=3),
    )
    result = await send(system, agent["id"], "I like jazz")
    (run_id,) = result["usage"]["run_ids"]

    runs = (await system.http.get("/v1/runs/", params={"agent_ids": [agent["id"]]})).json()
    assert [(r["id"], r["status"], r["stop_reason"]) for r in runs] == [
        (run_id, "completed", "end_turn")
    ]
    run = (await system.http.get(f"/v1/runs/{run_id}")).json()
    assert run["agent_id"] == agent["id"] and run["background"] is False
    assert run["request_config"]["assistant_message_tool_name"] == "send_message"
    assert run["completed_at"] and run["total_duration_ns"] > 0

    messages = (await system.http.get(f"/v1/runs/{run_id}/messages")).json()
    assert [m["message_type"] for m in messages] == [
        "user_message",
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    assert all(m["run_id"] == run_id for m in messages)

    steps = (await system.http.get(f"/v1/runs/{run_id}/steps", params={"order": "asc"})).json()
    assert [(s["prompt_tokens"], s["completion_tokens"]) for s in steps] == [(100, 10), (130, 3)]
    assert {s["model_handle"] for s in steps} == {"openai/gpt-4o-mini"}
    assert messages[1]["step_id"] == steps[0]["id"]
    step = (await system.http.get(f"/v1/steps/{steps[1]['id']}")).json()
    assert step["run_id"] == run_id and step["status"] == "success"

    usage = (await system.http.get(f"/v1/runs/{run_id}/usage")).json()
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (
        230,
        13,
        243,
    )
    # The official client reads the same resources.
    client = system.client()
    fetched = await asyncio.to_thread(client.runs.retrieve, run_id)
    assert fetched.status == "completed" and fetched.agent_id == agent["id"]
    listed = await asyncio.to_thread(lambda: list(client.runs.list(agent_ids=[agent["id"]])))
    assert [r.id for r in listed] == [run_id]


async def test_run_and_step_metrics_and_a_steps_messages(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(
        Reply(
            tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})],
            delay=0.2,
        ),
        Reply(content="Noted."),
    )
    (run_id,) = (await send(system, agent["id"], "I like tea"))["usage"]["run_ids"]
    tools = (await system.http.get("/v1/tools/", params={"name": "memory_insert"})).json()
    metrics = (await system.http.get(f"/v1/runs/{run_id}/metrics")).json()
    assert (metrics["id"], metrics["agent_id"], metrics["num_steps"]) == (run_id, agent["id"], 2)
    assert metrics["tools_used"] == [tools[0]["id"]]
    assert metrics["run_ns"] >= 200_000_000  # the model's first answer took 0.2 s

    steps = (await system.http.get(f"/v1/runs/{run_id}/steps", params={"order": "asc"})).json()
    client = system.client()
    first = await asyncio.to_thread(client.steps.metrics.retrieve, steps[0]["id"])
    assert (first.run_id, first.agent_id) == (run_id, agent["id"])
    assert first.llm_request_ns is not None and first.llm_request_ns >= 200_000_000
    assert first.step_start_ns is not None and first.llm_request_start_ns is not None
    assert first.step_start_ns <= first.llm_request_start_ns
    assert metrics["run_start_ns"] <= first.step_start_ns  # the run holds its steps
    assert first.tool_execution_ns is not None and first.tool_execution_ns > 0
    assert first.step_ns is not None and first.step_ns >= first.llm_request_ns
    second = (await system.http.get(f"/v1/steps/{steps[1]['id']}/metrics")).json()
    assert second["tool_execution_ns"] is None  # it called no tool
    assert 0 < second["llm_request_ns"] < 200_000_000 and second["step_ns"] > 0

    said = await asyncio.to_thread(lambda: list(client.steps.messages.list(steps[0]["id"])))
    assert [m.message_type for m in said] == ["tool_call_message", "tool_return_message"]
    replied = (await system.http.get(f"/v1/steps/{steps[1]['id']}/messages")).json()
    assert [(m["message_type"], m["content"]) for m in replied] == [("assistant_message", "Noted.")]


async def test_active_runs_and_readiness(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    held = threading.Event()
    llm.push(Reply(content="late", release=held))
    async with agent_events(system, agent["id"]) as events:
        try:
            url = f"/v1/agents/{agent['id']}/messages/async"
            run = (await system.http.post(url, json={"input": "one"})).json()
            await until(llm, lambda reqs: len(reqs) == 1)
            # (RunStarted is recorded while the first model call runs: the call can come
            # first, and the run show `created` until it is projected. CI met that race.)
            await events.wait_for("RunStarted", 1)
            await projected(system, events.last_seq)
            active = await system.http.get("/v1/runs/active", params={"agent_id": agent["id"]})
            assert [(r["id"], r["status"]) for r in active.json()] == [(run["id"], "running")]
        finally:
            held.set()
        await events.wait_for("RunCompleted", 1)
        await projected(system, events.last_seq)
    assert (await system.http.get("/v1/runs/active", params={"agent_id": agent["id"]})).json() == []
    # (Open without the API key, as health is: a load balancer's probe has none.)
    async with httpx.AsyncClient(base_url=system.base_url) as anonymous:
        ready = await anonymous.get("/v1/ready/")
    assert ready.status_code == 200 and ready.json()["status"] == "ok", ready.text


async def test_unknown_runs_and_steps(system: System) -> None:
    missing = "run-00000000-0000-4000-8000-000000000000"
    assert (await system.http.get(f"/v1/runs/{missing}")).status_code == 404
    assert (await system.http.get(f"/v1/runs/{missing}/steps")).status_code == 404
    step = "step-00000000-0000-4000-8000-000000000000"
    assert (await system.http.get(f"/v1/steps/{step}")).status_code == 404
    for path in (f"/v1/runs/{missing}/metrics", f"/v1/steps/{step}/metrics"):
        assert (await system.http.get(path)).status_code == 404, path
    assert (await system.http.get(f"/v1/steps/{step}/messages")).status_code == 404
    response = await system.http.get("/v1/runs/not-a-run")
    assert response.status_code == 422 and "run" in response.json()["detail"]


async def test_async_runs_and_cancel(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    held = threading.Event()
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "x"})], release=held),
    )
    url = f"/v1/agents/{agent['id']}/messages"
    try:
        async with agent_events(system, agent["id"]) as events:
            first = (await system.http.post(f"{url}/async", json={"input": "one"})).json()
            assert first["status"] in ("created", "running") and first["background"] is True
            await until(llm, lambda reqs: len(reqs) == 1)
            second = (await system.http.post(f"{url}/async", json={"input": "two"})).json()
            assert (await system.http.get(f"/v1/runs/{second['id']}")).json()["status"] == (
                "created"
            )
            cancelled = await system.http.post(f"{url}/cancel", json={"run_ids": [second["id"]]})
            assert cancelled.json() == {second["id"]: "cancelled"}
            # Without ids: every active run of the agent (here the first, whose
            # LLM call is still held: the cancellation interrupts it).
            cancelled = await system.http.post(f"{url}/cancel")
            assert cancelled.json() == {first["id"]: "cancelled"}
            await events.wait_for("RunCompleted", 2)
            await projected(system, events.last_seq)
            assert not held.is_set()
    finally:
        held.set()
    runs = {
        r["id"]: r
        for r in (await system.http.get("/v1/runs/", params={"agent_id": agent["id"]})).json()
    }
    # The first stopped during its LLM call (that answer is never recorded, so its tool
    # never ran); the second never ran at all.
    assert (runs[first["id"]]["status"], runs[first["id"]]["stop_reason"]) == (
        "cancelled",
        "cancelled",
    )
    assert runs[second["id"]]["stop_reason"] == "cancelled"
    assert len(llm.requests) == 1
    types = [
        m["message_type"]
        for m in (await system.http.get(f"/v1/runs/{first['id']}/messages")).json()
    ]
    assert types == ["user_message"]
    assert (await system.http.get(f"/v1/runs/{first['id']}/steps")).json() == []
    nothing = await system.http.post(f"{url}/cancel")
    assert nothing.status_code == 409 and "no active runs" in nothing.json()["detail"].lower()


async def test_runs_steps_and_messages_page_with_cursors(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    run_ids = []
    for i in range(3):
        llm.push(Reply(content=f"answer {i}"))
        result = await send(system, agent["id"], f"question {i}")
        run_ids.append(result["usage"]["run_ids"][0])
    http = system.http

    async def walk(path: str, **params: object) -> list[str]:
        seen: list[str] = []
        after = None
        while True:
            query = {**params, "limit": 1, **({"after": after} if after else {})}
            page = (await http.get(path, params=query)).json()
            if not page:
                return seen
            after = page[-1]["id"]
            seen.append(after)

    assert await walk("/v1/runs/", agent_id=agent["id"], order="asc") == run_ids
    assert await walk("/v1/runs/", agent_id=agent["id"], order="desc") == run_ids[::-1]
    newest_two = (
        await http.get("/v1/runs/", params={"agent_id": agent["id"], "before": run_ids[0]})
    ).json()
    assert [r["id"] for r in newest_two] == run_ids[:0:-1]
    history = (await http.get(f"/v1/agents/{agent['id']}/messages", params={"order": "asc"})).json()
    first = history[0]["id"]
    # Letta: `after` is newer whatever the order; the page comes back oldest first.
    later = (
        await http.get(f"/v1/agents/{agent['id']}/messages", params={"after": first, "limit": 2})
    ).json()
    assert [m["content"] for m in later] == ["question 2", "answer 2"]
    # As in Letta, a run cursor naming no run is ignored (a client deleting as it
    # pages is not stopped by it).
    unknown = await http.get(
        "/v1/runs/",
        params={"agent_id": agent["id"], "after": "run-00000000-0000-4000-8000-000000000000"},
    )
    assert [r["id"] for r in unknown.json()] == run_ids[::-1]
