"""Streaming: token deltas, pings while idle, and a client that leaves early."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tests.e2e.conftest import System
from tests.e2e.support import agent_events, new_agent, parse_sse, projected
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


def body(text: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **extra}


async def test_token_chunks_repeat_the_id_and_carry_only_new_text(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    text = "Tokens arrive one small piece at a time."
    llm.push(Reply(content=text))
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/stream", json=body("go", stream_tokens=True)
    )
    chunks = [d for _, d in parse_sse(response.text) if d != "[DONE]"]
    pieces = [c for c in chunks if c["message_type"] == "assistant_message"]
    # Deltas are best effort (core NATS); the recorded answer fills in any that came late,
    # so the pieces always add up to the whole text, with no piece repeated.
    assert len(pieces) > 1
    assert "".join(p["content"] for p in pieces) == text
    assert len({p["id"] for p in pieces}) == 1
    history = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    assert history[-1]["id"] == pieces[0]["id"] and history[-1]["content"] == text


async def test_tool_call_arguments_stream_in_pieces(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    arguments = {"label": "human", "new_string": "Likes long walks along the river at dawn."}
    llm.push(Reply(tool_calls=[("memory_insert", arguments)]), Reply(content="Noted."))
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/stream", json=body("remember", stream_tokens=True)
    )
    chunks = [d for _, d in parse_sse(response.text) if d != "[DONE]"]
    calls = [c for c in chunks if c["message_type"] == "tool_call_message"]
    # Pieces of one call: its id on each, its name on the first only, arguments that
    # add up to the recorded call's (the recorded message fills in any late piece).
    assert len(calls) > 1
    assert len({c["id"] for c in calls}) == 1
    assert {c["tool_call"]["tool_call_id"] for c in calls} == {
        calls[0]["tool_call"]["tool_call_id"]
    }
    assert calls[0]["tool_call"]["name"] == "memory_insert"
    assert all(c["tool_call"]["name"] is None for c in calls[1:])
    assert json.loads("".join(c["tool_call"]["arguments"] for c in calls)) == arguments
    returns = [c for c in chunks if c["message_type"] == "tool_return_message"]
    assert returns and returns[0]["status"] == "success"
    history = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    recorded = next(m for m in history if m["message_type"] == "tool_call_message")
    assert recorded["id"] == calls[0]["id"]
    assert json.loads(recorded["tool_call"]["arguments"]) == arguments


async def test_pings_while_idle(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    held = threading.Event()
    llm.push(Reply(content="finally", release=held))
    frames: list[str] = []
    try:
        async with system.http.stream(
            "POST", f"/v1/agents/{agent['id']}/messages/stream", json=body("wait")
        ) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    frames.append(line[6:])
                if frames and frames[-1] == '{"message_type": "ping"}':
                    held.set()  # a ping came while the LLM was busy: let the run finish
    finally:
        held.set()
    kinds = [f if f == "[DONE]" else json.loads(f)["message_type"] for f in frames]
    assert kinds[0] == "ping"
    assert [k for k in kinds if k != "ping"] == [
        "assistant_message",
        "stop_reason",
        "usage_statistics",
        "[DONE]",
    ]


async def test_no_pings_when_not_asked(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    # An LLM slower than the ping interval (0.3 s in these tests).
    llm.push(Reply(content="slowly", delay=1.0))
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/stream", json=body("wait", include_pings=False)
    )
    kinds = [d if d == "[DONE]" else d["message_type"] for _, d in parse_sse(response.text, True)]
    assert kinds == ["assistant_message", "stop_reason", "usage_statistics", "[DONE]"]


async def test_a_client_that_disconnects_does_not_cancel_the_run(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    held = threading.Event()
    llm.push(Reply(content="still here", release=held))
    try:
        async with agent_events(system, agent["id"]) as events:
            async with system.http.stream(
                "POST", f"/v1/agents/{agent['id']}/messages/stream", json=body("bye")
            ) as response:
                async for line in response.aiter_lines():
                    if "ping" in line:
                        break  # the run is under way; leave
            held.set()
            await events.wait_for("RunCompleted")
            await projected(system, events.last_seq)
    finally:
        held.set()
    runs = (await system.http.get("/v1/runs/", params={"agent_id": agent["id"]})).json()
    assert [(r["status"], r["stop_reason"]) for r in runs] == [("completed", "end_turn")]
    history = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    assert [m.get("content") for m in history[1:]] == ["bye", "still here"]
