"""The context window: summarizing old turns past ~90%, forced summaries, overflow."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import System
from tests.e2e.support import new_agent, on_subject, send
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply
from tests.servers import operator

pytestmark = pytest.mark.e2e


def summarizing(llm: FakeOpenAI) -> list[dict[str, Any]]:
    return [r for r in llm.requests if r["messages"][0]["content"].startswith("You summarize")]


def summarizer_or_echo(body: dict[str, Any]) -> Reply:
    if body["messages"][0]["content"].startswith("You summarize"):
        return Reply(content="SUMMARY: the user told long stories about turns 1 and 2.")
    return echo_reply(body)


def assert_tool_pairs_whole(request: dict[str, Any]) -> None:
    """Every tool result follows the assistant message that called it."""
    open_calls: set[str] = set()
    for m in request["messages"]:
        if m["role"] == "assistant":
            open_calls = {tc["id"] for tc in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, request["messages"]


async def test_old_turns_are_summarized_past_90_percent_and_stay_searchable(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system, context_window_limit=4000)
    llm.default_reply = summarizer_or_echo
    # A turn with a tool call first: it must never be split from its result.
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Tells stories"})]),
        Reply(content="Noted."),
    )
    await send(system, agent["id"], "turn 1 zebra " + "story " * 200)
    turn = 1
    while not summarizing(llm) and turn < 10:
        turn += 1
        await send(system, agent["id"], f"turn {turn} " + "story " * 200)
    assert summarizing(llm), "the context never reached 90% of the window"
    after = llm.requests[-1]
    assert after["messages"][1]["role"] == "user"
    assert after["messages"][1]["content"].startswith("Note: prior messages have been hidden")
    assert "SUMMARY: the user told long stories" in after["messages"][1]["content"]
    assert not any("zebra" in (m.get("content") or "") for m in after["messages"])
    assert_tool_pairs_whole(after)
    # Evicted messages stay in the history and are found by conversation_search.
    history = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    assert any("zebra" in (m.get("content") or "") for m in history)
    llm.push(Reply(tool_calls=[("conversation_search", {"query": "zebra"})]), Reply(content="ok"))
    result = await send(system, agent["id"], "what animal did I mention first?")
    found = result["messages"][1]
    assert found["message_type"] == "tool_return_message" and "zebra" in found["tool_return"]


async def test_forced_summary(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.default_reply = summarizer_or_echo
    for text in ("first", "second", "third"):
        await send(system, agent["id"], text)
    response = await system.http.post(f"/v1/agents/{agent['id']}/summarize")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["summary"].endswith("SUMMARY: the user told long stories about turns 1 and 2.")
    # (Counting the system message, as Letta does.)
    assert (body["num_messages_before"], body["num_messages_after"]) == (7, 4)
    transcript = summarizing(llm)[-1]["messages"][1]["content"]
    assert "user: first" in transcript and "third" not in transcript
    await send(system, agent["id"], "fourth")
    context = [m.get("content") for m in llm.requests[-1]["messages"][1:]]
    assert context[0].startswith("Note: prior messages")
    assert context[1:] == ["third", "echo: third", "fourth"]


async def test_a_system_prompt_over_the_window_stops_the_run(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(
        system,
        context_window_limit=1024,
        memory_blocks=[{"label": "human", "value": "lots of detail " * 600}],
    )
    result = await send(system, agent["id"], "hi")
    assert result["stop_reason"]["stop_reason"] == "context_window_overflow_in_system_prompt"
    assert not llm.requests


async def test_a_summary_event_does_not_grow_with_what_it_evicts(
    system: System, llm: FakeOpenAI
) -> None:
    import nats

    from o_contracts import subjects
    from o_contracts.envelope import decode

    agent = await new_agent(system)
    llm.default_reply = summarizer_or_echo
    for i in range(60):
        await send(system, agent["id"], f"m{i}")
    response = await system.http.post(f"/v1/agents/{agent['id']}/summarize")
    assert response.status_code == 200, response.text
    assert response.json()["num_messages_before"] == 121
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        found = [
            raw
            for _, raw in await on_subject(nc, subjects.agent_subject(agent["id"]))
            if decode(raw).type == "ContextSummarized"
        ]
    finally:
        await nc.close()
    (raw,) = found
    event = decode(raw).data
    # 118 messages left (ids of ~45 bytes each in version 1); the event names one.
    assert event.evicted_count == 118 and event.evicted_message_ids == []
    assert len(raw) < 2000
    await send(system, agent["id"], "after")
    context = [m.get("content") for m in llm.requests[-1]["messages"][1:]]
    assert context[0].startswith("Note: prior messages") and context[1:] == [
        "m59",
        "echo: m59",
        "after",
    ]
