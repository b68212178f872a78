"""`POST /v1/messages/search` through the official SDK: every agent's messages searched by
full text (Letta answers it only with its hosted Turbopuffer; Letta Code's `letta messages
search` and its recall subagent ask it)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.e2e.conftest import System
from tests.e2e.support import new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


def found(results: Any) -> list[tuple[str, str, str]]:
    """(type, agent, text) of each result, in order."""
    return [(r.message_type, r.agent_id, r.content) for r in results]


async def test_every_agents_messages_are_searched_best_first(
    system: System, llm: FakeOpenAI
) -> None:
    # Only this test's messages hold it; letters only, so that it stems like a word.
    word = "otter" + "".join(chr(ord("a") + int(c, 16)) for c in uuid.uuid4().hex[:8])
    first, second = await new_agent(system), await new_agent(system)
    client = system.client()
    other = client.conversations.create(agent_id=first["id"])
    llm.push(
        Reply(content=f"noted: {word}s sleep holding hands"),
        Reply(content="noted: kelp"),
        Reply(content=f"noted: a raft of {word}s"),
    )
    await send(system, first["id"], f"{word}s sleep holding hands")
    list(
        client.conversations.messages.create(
            other.id, messages=[{"role": "user", "content": f"kelp hides the {word}"}]
        )
    )
    await send(system, second["id"], f"a raft of {word}s")

    everywhere = client.messages.search(query=word, search_mode="fts")
    assert sorted(found(everywhere)) == sorted(
        [
            ("user_message", first["id"], f"{word}s sleep holding hands"),
            ("assistant_message", first["id"], f"noted: {word}s sleep holding hands"),
            ("user_message", first["id"], f"kelp hides the {word}"),
            ("user_message", second["id"], f"a raft of {word}s"),
            ("assistant_message", second["id"], f"noted: a raft of {word}s"),
        ]
    )
    result = everywhere[0]
    assert result.message_id.startswith("message-") and result.created_at is not None
    # Messages holding the query verbatim come before those matching a word of it (and
    # of equals, the newest first: the answer).
    phrase = found(client.messages.search(query=f"raft of {word}s"))
    assert phrase[:2] == [
        ("assistant_message", second["id"], f"noted: a raft of {word}s"),
        ("user_message", second["id"], f"a raft of {word}s"),
    ]
    # (The others hold the word, not the phrase; other tests' messages may hold "raft".)
    assert len([p for p in phrase if p[1] in (first["id"], second["id"])]) == 5
    # One agent; its default conversation; one of its conversations.
    mine = client.messages.search(query=word, agent_id=first["id"])
    assert {a for _, a, _ in found(mine)} == {first["id"]} and len(mine) == 3
    default = client.messages.search(query=word, agent_id=first["id"], conversation_id="default")
    assert [t for _, _, t in found(default)] == [
        f"noted: {word}s sleep holding hands",
        f"{word}s sleep holding hands",
    ]
    assert {r.conversation_id for r in default} == {None}
    elsewhere = client.messages.search(query=word, conversation_id=other.id)
    assert [(r.conversation_id, r.content) for r in elsewhere] == [
        (other.id, f"kelp hides the {word}")
    ]
    assert len(client.messages.search(query=word, limit=2)) == 2


async def test_what_it_cannot_search_is_refused_with_the_reason(system: System) -> None:
    http = system.http
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"query": "x", "search_mode": "vector"}, 400, "does not keep"),
        ({"query": "x", "conversation_id": "default"}, 422, "needs an agent_id"),
        ({"query": "x", "agent_id": "nope"}, 422, "agent"),
        ({"query": "x", "limit": 101}, 422, "limit"),
        ({"query": "  "}, 422, "query must not be empty"),
        ({}, 422, "query"),
    ]
    for body, status, words in cases:
        response = await http.post("/v1/messages/search", json=body)
        assert response.status_code == status, (body, response.text)
        assert words in response.text, (body, response.text)
    # Wildcards are characters like any other: with LIKE's meaning this would match every
    # message of three characters or more; as written, none holds it.
    response = await http.post("/v1/messages/search", json={"query": "%_%_%_%"})
    assert response.status_code == 200 and response.json() == [], response.text
