"""Each step's exchange with its model, as the provider saw it (Letta's provider traces:
`client.steps.trace.retrieve`), and the trace routes' answers where there is none."""

from __future__ import annotations

import asyncio
from typing import Any

import letta_client
import pytest

from o_contracts import subjects
from tests.e2e.conftest import System
from tests.e2e.support import DEADLINE, connected, new_agent
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

USER = [{"role": "user", "content": "Remember that I like tea."}]


async def kept(system: System, *step_ids: str) -> None:
    """Wait until the executor has put these steps' traces (it writes them off the run's
    path): a watch on each step's key hears its put (or finds it there)."""
    async with connected(system) as nc:
        bucket = await nc.jetstream().key_value(subjects.PROVIDER_TRACES_BUCKET)
        for step_id in step_ids:
            watch = await bucket.watch(step_id)
            try:
                async with asyncio.timeout(DEADLINE):
                    async for entry in watch:
                        if entry is not None and entry.value:
                            break
            finally:
                await watch.stop()


def steps_of(client: letta_client.Letta, run_id: str) -> list[Any]:
    return sorted(client.runs.steps.list(run_id).items, key=lambda s: s.created_at)


async def test_each_step_keeps_what_was_sent_and_what_came_back(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    client = system.client()
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})]),
        Reply(content="Noted.", prompt_tokens=40, completion_tokens=2),
    )
    reply = await asyncio.to_thread(client.agents.messages.create, agent["id"], messages=USER)
    first, second = steps_of(client, reply.messages[0].run_id)
    await kept(system, first.id, second.id)
    asked = await asyncio.to_thread(client.steps.trace.retrieve, first.id)
    assert asked is not None
    assert (asked.step_id, asked.run_id, asked.agent_id) == (
        first.id,
        reply.messages[0].run_id,
        agent["id"],
    )
    assert asked.id.startswith("provider_trace-") and asked.call_type == "agent_step"
    # The request as sent: the same body the provider received.
    assert asked.request_json == llm.requests[-2]
    assert asked.request_json["messages"][-1] == {"role": "user", "content": USER[0]["content"]}
    assert {t["function"]["name"] for t in asked.request_json["tools"]} >= {"memory_insert"}
    (call,) = asked.response_json["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "memory_insert"
    assert asked.llm_config == {
        "handle": "openai/gpt-4o-mini",
        "model": "gpt-4o-mini",
        "provider_name": "openai",
    }
    answered = await asyncio.to_thread(client.steps.trace.retrieve, second.id)
    assert answered is not None
    assert answered.response_json["choices"][0]["message"]["content"] == "Noted."
    assert answered.response_json["usage"]["prompt_tokens"] == 40
    # The second request carries the first step's tool result.
    assert answered.request_json["messages"][-1]["role"] == "tool"
    # Letta's deprecated route answers the same.
    old = await system.http.get(f"/v1/telemetry/{second.id}")
    assert old.status_code == 200 and old.json()["response_json"] == answered.response_json


async def test_a_streamed_step_keeps_the_answer_it_adds_up_to(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="Tea it is, Sam.", prompt_tokens=30, completion_tokens=5))
    streamed = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/stream",
        json={"messages": USER, "stream_tokens": True},
    )
    assert streamed.status_code == 200
    client = system.client()
    run_id = client.runs.list(agent_id=agent["id"]).items[0].id
    (step,) = steps_of(client, run_id)
    await kept(system, step.id)
    trace = (await system.http.get(f"/v1/steps/{step.id}/trace")).json()
    assert trace["request_json"]["stream"] is True
    assert trace["request_json"]["messages"] == llm.requests[-1]["messages"]
    (choice,) = trace["response_json"]["choices"]
    assert choice["message"] == {"role": "assistant", "content": "Tea it is, Sam."}
    assert choice["finish_reason"] == "stop"
    assert trace["response_json"]["usage"]["completion_tokens"] == 5


async def test_an_anthropic_step_keeps_anthropics_own_shapes(
    system: System, claude: FakeAnthropic
) -> None:
    agent = await new_agent(system, model="anthropic/claude-sonnet-5-5")
    claude.push(Reply(content="Noted, tea."))
    client = system.client()
    reply = await asyncio.to_thread(client.agents.messages.create, agent["id"], messages=USER)
    (step,) = steps_of(client, reply.messages[0].run_id)
    await kept(system, step.id)
    trace = await asyncio.to_thread(client.steps.trace.retrieve, step.id)
    assert trace is not None
    assert trace.request_json["model"] == "claude-sonnet-5-5"
    assert "<memory_blocks>" in str(trace.request_json["system"])
    assert trace.request_json["messages"] == claude.requests[-1]["messages"]
    assert trace.response_json["type"] == "message"
    assert trace.response_json["content"][0]["text"] == "Noted, tea."
    assert trace.llm_config["provider_name"] == "anthropic"


async def test_no_trace_is_null_and_a_runs_spans_are_not_kept(system: System) -> None:
    client = system.client()
    unknown = "step-00000000-0000-4000-8000-000000000000"
    assert await asyncio.to_thread(client.steps.trace.retrieve, unknown) is None
    assert (await system.http.get(f"/v1/telemetry/{unknown}")).json() is None
    assert (await system.http.get("/v1/steps/not-a-step/trace")).status_code == 422
    spans = await system.http.get("/v1/runs/run-00000000-0000-4000-8000-000000000000/trace")
    assert spans.status_code == 501
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in spans.json()["detail"]
