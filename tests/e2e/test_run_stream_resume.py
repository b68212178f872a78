"""A background run's stream, resumed (POST /v1/runs/{id}/stream): chunks numbered by
seq_id; a client that reconnects with `starting_after` gets what it missed, then the live
rest, each chunk once, from any gateway: the stream is read from the log."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any

import letta_client
import pytest
from letta_client import Letta

from tests.e2e.conftest import System
from tests.e2e.support import another_gateway, new_agent, parse_sse
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

UNNUMBERED = ("ping",)


def search_then_answer(llm: FakeOpenAI, release: threading.Event | None = None) -> None:
    llm.push(
        Reply(tool_calls=[("conversation_search", {"query": "tea"})]),
        Reply(content="You said you like tea.", release=release),
    )


def ask(text: str = "What do I like?") -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def numbered(chunks: list[Any]) -> list[tuple[int, str, str | None, str | None]]:
    """(seq_id, type, id, otid) of the chunks that carry a seq_id."""
    out = []
    for c in chunks:
        data = c if isinstance(c, dict) else c.model_dump()
        if data.get("seq_id") is not None:
            out.append((data["seq_id"], data["message_type"], data.get("id"), data.get("otid")))
    return out


def replay_matches(client: Letta, agent_id: str, llm: FakeOpenAI) -> None:
    search_then_answer(llm)
    live = list(client.agents.messages.stream(agent_id, messages=ask(), background=True))
    first = numbered(live)
    kinds = [kind for _, kind, _, _ in first]
    assert kinds == [
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
        "stop_reason",
        "usage_statistics",
    ], kinds
    assert [seq for seq, *_ in first] == [1, 2, 3, 4, 5]
    run_id = live[0].run_id

    # The whole stream again, then only what follows a chunk the client had.
    again = list(client.runs.messages.stream(run_id, starting_after=0))
    assert numbered(again) == first
    assert [c.model_dump() for c in again if c.message_type == "assistant_message"] == [
        c.model_dump() for c in live if c.message_type == "assistant_message"
    ]
    rest = list(client.runs.messages.stream(run_id, starting_after=2))
    assert numbered(rest) == first[2:]
    assert numbered(list(client.runs.messages.stream(run_id, starting_after=5))) == []


async def test_a_finished_background_run_streams_again_from_any_chunk(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    await asyncio.to_thread(replay_matches, system.client(), agent["id"], llm)


def tokens_then_replay(client: Letta, agent_id: str, llm: FakeOpenAI) -> None:
    # The model holds the second half of its answer until a delta of the first half has
    # reached the client: deltas are best effort, and one that comes after its recorded
    # message is dropped, so only a held answer makes their arrival certain.
    rest = threading.Event()
    llm.push(
        Reply(
            content="Tokens arrive one small piece at a time, then the whole.", hold_mid_stream=rest
        )
    )
    live: list[Any] = []
    try:
        stream = client.agents.messages.stream(
            agent_id, messages=ask(), background=True, stream_tokens=True
        )
        for chunk in stream:
            live.append(chunk)
            if chunk.message_type == "assistant_message":
                rest.set()
    finally:
        rest.set()
    pieces = [c for c in live if c.message_type == "assistant_message"]
    # Token deltas are not in the log: unnumbered. The recorded message that follows them
    # (what they missed, or an empty piece) carries its seq_id, so a client that read it
    # resumes after it.
    assert len(pieces) > 1 and all(p.seq_id is None for p in pieces[:-1])
    assert pieces[-1].seq_id == 1
    text = "".join(p.content for p in pieces)
    assert text == "Tokens arrive one small piece at a time, then the whole."
    assert len({(p.id, p.otid) for p in pieces}) == 1
    replay = [c for c in client.runs.messages.stream(live[0].run_id) if c.message_type != "ping"]
    assert [(c.message_type, c.seq_id) for c in replay] == [
        ("assistant_message", 1),
        ("stop_reason", 2),
        ("usage_statistics", 3),
    ]
    assert (replay[0].id, replay[0].otid, replay[0].content) == (pieces[0].id, pieces[0].otid, text)


async def test_a_token_streamed_background_run_replays_whole_messages(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    await asyncio.to_thread(tokens_then_replay, system.client(), agent["id"], llm)


def refused(client: Letta, agent_id: str, llm: FakeOpenAI) -> None:
    llm.push(Reply(content="Hi."))
    reply = client.agents.messages.create(agent_id, messages=ask())
    with pytest.raises(letta_client.BadRequestError) as caught:
        list(client.runs.messages.stream(reply.messages[0].run_id))
    assert "background" in str(caught.value)
    with pytest.raises(letta_client.NotFoundError):
        list(client.runs.messages.stream("run-00000000-0000-4000-8000-000000000000"))


async def test_only_a_background_run_streams_again(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    await asyncio.to_thread(refused, system.client(), agent["id"], llm)
    bad = await system.http.post(
        "/v1/runs/run-00000000-0000-4000-8000-000000000000/stream", json={"starting_after": "soon"}
    )
    assert bad.status_code == 422 and "detail" in bad.json()


async def test_a_client_resumes_on_another_gateway_after_its_own_died(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    held = threading.Event()
    search_then_answer(llm, release=held)
    seen: list[dict[str, Any]] = []
    try:
        async with another_gateway(system) as (gateway, supervisor):
            async with gateway.stream(
                "POST",
                f"/v1/agents/{agent['id']}/messages/stream",
                json={"messages": ask(), "background": True},
            ) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        seen += [d for _, d in parse_sse(line + "\n\n")]
                    if any(c["message_type"] == "tool_return_message" for c in seen):
                        break  # the run waits on the model's second answer: kill the gateway
                (pid,) = supervisor.pids("gateway")
                os.kill(pid, signal.SIGKILL)
        held.set()
        run_id = seen[0]["run_id"]
        last = max(c["seq_id"] for c in seen if c.get("seq_id") is not None)
        assert last == 2
        resumed = await asyncio.to_thread(
            lambda: list(system.client().runs.messages.stream(run_id, starting_after=last))
        )
    finally:
        held.set()
    got = numbered(seen) + numbered(resumed)
    assert [seq for seq, *_ in got] == [1, 2, 3, 4, 5]
    assert [kind for _, kind, _, _ in got] == [
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
        "stop_reason",
        "usage_statistics",
    ]
    # Exactly what a client that never lost its connection reads.
    whole = await asyncio.to_thread(lambda: list(system.client().runs.messages.stream(run_id)))
    assert numbered(whole) == got
