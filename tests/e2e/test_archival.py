"""Archival memory through the API, the official client and the agents' tools.

Agents here embed with `openai/text-embedding-3-small` against the local
OpenAI-protocol server (hash vectors, no meaning), so what these tests find by
words they find through Postgres full-text search; semantic search with the
local model is covered in tests/integration/test_archival_search.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import letta_client
import pytest

from tests.e2e.conftest import System
from tests.e2e.support import new_agent, send, until
from tests.e2e.test_durable_runs import kill_executors
from tests.e2e.test_schedules import kill
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e
EMBEDDING = "openai/text-embedding-3-small"


async def insert(system: System, agent_id: str, **body: Any) -> dict[str, Any]:
    response = await system.http.post(f"/v1/agents/{agent_id}/archival-memory", json=body)
    assert response.status_code == 200, response.text
    (passage,) = response.json()
    return dict(passage)


async def search(system: System, agent_id: str, **params: Any) -> list[dict[str, Any]]:
    response = await system.http.get(f"/v1/agents/{agent_id}/archival-memory/search", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["count"] == len(body["results"])
    return list(body["results"])


def archival_client_scenario(system: System, agent_id: str) -> dict[str, Any]:
    client = system.client()
    created = client.agents.passages.create(
        agent_id, text="The deploy key for staging is code XK-4471.", tags=["ops"]
    )
    client.agents.passages.create(agent_id, text="Sam prefers green tea in the morning.")
    found = client.agents.passages.search(agent_id=agent_id, query="XK-4471")
    listed = client.agents.passages.list(agent_id)
    client.agents.passages.delete(created[0].id, agent_id=agent_id)
    after = client.agents.passages.list(agent_id)
    with pytest.raises(letta_client.NotFoundError):
        client.agents.passages.delete(created[0].id, agent_id=agent_id)
    return {"created": created, "found": found, "listed": listed, "after": after}


async def test_archival_memory_with_the_official_client(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system, embedding=EMBEDDING)
    r = await asyncio.to_thread(archival_client_scenario, system, agent["id"])
    (created,) = r["created"]
    assert created.id.startswith("passage-") and created.tags == ["ops"]
    assert created.embedding_config is not None
    # An exact code is found by full-text search even though the vectors mean nothing.
    assert r["found"].results[0].content == "The deploy key for staging is code XK-4471."
    assert r["found"].results[0].tags == ["ops"]
    assert [p.text for p in r["listed"]] == [
        "The deploy key for staging is code XK-4471.",
        "Sam prefers green tea in the morning.",
    ]
    assert [p.text for p in r["after"]] == ["Sam prefers green tea in the morning."]


async def test_search_filters_by_tags_and_dates(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system, embedding=EMBEDDING)
    aid = agent["id"]
    old = (datetime.now(UTC) - timedelta(days=30)).isoformat()
    await insert(system, aid, text="garden plan: tomatoes", tags=["garden", "plan"], importance=3)
    await insert(system, aid, text="garden log: watered", tags=["garden"], importance=3)
    await insert(system, aid, text="garden history: planted", created_at=old, importance=3)

    any_tag = await search(system, aid, query="garden", tags=["plan", "garden"])
    assert {r["content"] for r in any_tag} == {"garden plan: tomatoes", "garden log: watered"}
    all_tags = await search(
        system, aid, query="garden", tags=["plan", "garden"], tag_match_mode="all"
    )
    assert [r["content"] for r in all_tags] == ["garden plan: tomatoes"]
    recent = await search(
        system, aid, query="garden", start_datetime=(datetime.now(UTC) - timedelta(days=1))
    )
    assert "garden history: planted" not in {r["content"] for r in recent} and len(recent) == 2
    older = await search(
        system, aid, query="garden", end_datetime=(datetime.now(UTC) - timedelta(days=7))
    )
    assert [r["content"] for r in older] == ["garden history: planted"]
    assert len(await search(system, aid, query="garden", top_k=1)) == 1


async def test_bad_archival_input_is_refused_and_changes_nothing(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system, embedding=EMBEDDING)
    base = f"/v1/agents/{agent['id']}/archival-memory"
    http = system.http
    cases = [
        (await http.post(base, json={"text": ""}), 422),
        (await http.post(base, json={"text": "   "}), 400),
        (await http.post(base, json={"text": "x", "tags": [""]}), 400),
        (await http.post(base, json={"text": "x", "tags": "notalist"}), 422),
        (await http.post(base, json={"text": "x", "importance": 11}), 422),
        (await http.post(base, json={"text": "x", "created_at": "yesterday"}), 422),
        (await http.get(f"{base}/search", params={"query": ""}), 422),
        (await http.get(f"{base}/search", params={"query": "x", "tags": [""]}), 422),
        (await http.get(f"{base}/search", params={"query": "x", "tag_match_mode": "some"}), 422),
        (await http.get(f"{base}/search", params={"query": "x", "start_datetime": "soon"}), 422),
        (
            await http.get(
                f"{base}/search",
                params={
                    "query": "x",
                    "start_datetime": "2026-02-01T00:00:00Z",
                    "end_datetime": "2026-01-01T00:00:00Z",
                },
            ),
            422,
        ),
        (await http.get(f"{base}/search", params={"query": "x", "top_k": 0}), 422),
        (await http.delete(f"{base}/not-a-passage"), 422),
        (await http.delete(f"{base}/passage-00000000-0000-4000-8000-000000000000"), 404),
        (
            await http.get("/v1/agents/agent-00000000-0000-4000-8000-000000000000/archival-memory"),
            404,
        ),
    ]
    for response, status in cases:
        assert response.status_code == status, (response.request.url, response.text)
        assert response.json()["detail"]
    assert (await http.get(base)).json() == []


async def test_importance_is_rated_by_the_agents_llm(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system, embedding=EMBEDDING)
    llm.push(Reply(content="9"))
    rated = await insert(system, agent["id"], text="Sam got into medical school today.")
    assert rated["metadata"]["importance"] == 9
    assert rated["metadata"]["importance_source"] == "llm"
    rating_prompt = llm.requests[-1]["messages"][-1]["content"]
    assert "poignancy" in rating_prompt and "medical school" in rating_prompt
    # An answer that is not a rating gives the neutral default, not a failure.
    llm.push(Reply(content="I cannot say."))
    unrated = await insert(system, agent["id"], text="Sam brushed teeth.")
    assert unrated["metadata"]["importance"] == 5
    assert unrated["metadata"]["importance_source"] == "default"
    given = await insert(system, agent["id"], text="Sam's birthday is 3 May.", importance=8)
    assert given["metadata"]["importance_source"] == "caller"


async def test_an_executor_killed_while_it_rates_a_memory_leaves_it_to_another(
    system: System, llm: FakeOpenAI
) -> None:
    # The memory service's question goes to one executor over core NATS, which does not
    # redeliver: it watches the one that took it (o_runtime/watched_requests.py) and asks
    # again when it dies, rather than waiting out its timeout while the agent's memory
    # command waits (a chaos run held a run ~90 s so).
    agent = await new_agent(system, embedding=EMBEDDING)
    held = threading.Event()
    llm.push(Reply(content="9", release=held))
    inserting = asyncio.create_task(
        system.http.post(
            f"/v1/agents/{agent['id']}/archival-memory",
            json={"text": "Sam moved to Lisbon today."},
            timeout=60,
        )
    )
    try:
        await until(llm, lambda rs: any(rates_lisbon(r) for r in rs))
        # The executor that asked the model dies with the question in hand; the one
        # restarted in its place is asked, and its answer is the rating.
        llm.push(Reply(content="7"))
        await kill_executors(system)
        response = await asyncio.wait_for(inserting, 60)
    finally:
        held.set()
    assert response.status_code == 200, response.text
    (passage,) = response.json()
    assert passage["metadata"]["importance"] == 7
    assert passage["metadata"]["importance_source"] == "llm"
    assert len([r for r in llm.requests if rates_lisbon(r)]) == 2


async def test_a_memory_service_killed_mid_search_leaves_it_to_another(
    system: System, llm: FakeOpenAI
) -> None:
    # A search waits on the query's embedding; the memory replica that took it dies there.
    # The gateway watched it (o_runtime/watched_requests.py) and asks the restarted one,
    # rather than answering 504 after its 30 s.
    agent = await new_agent(system, embedding=EMBEDDING)
    await insert(system, agent["id"], text="The spare key is under the blue pot.", importance=4)
    asked = len(llm.embedding_requests)
    llm.hold_embeddings_after(0)
    try:
        searching = asyncio.create_task(
            system.http.get(
                f"/v1/agents/{agent['id']}/archival-memory/search",
                params={"query": "spare key"},
                timeout=60,
            )
        )
        assert await asyncio.to_thread(llm.wait_for_embedding_requests, asked + 1)
        await kill(system, "memory")
    finally:
        llm.release_embeddings()
    response = await asyncio.wait_for(searching, 60)
    assert response.status_code == 200, response.text
    assert [r["content"] for r in response.json()["results"]] == [
        "The spare key is under the blue pot."
    ]
    # The query embedded twice: by the replica that died, then by its restart.
    assert [r["input"] for r in llm.embedding_requests[asked:]] == [["spare key"]] * 2


def rates_lisbon(request: dict[str, Any]) -> bool:
    return "messages" in request and "Lisbon" in json.dumps(request["messages"])


async def test_an_anthropic_agents_memories_are_rated_by_its_model(
    system: System, llm: FakeOpenAI, claude: FakeAnthropic
) -> None:
    # The memory service asks the executor (o_memory/model_calls.py), which speaks every
    # provider's protocol: not only OpenAI-protocol agents get their memories rated.
    agent = await new_agent(system, model="anthropic/claude-haiku-5-5")
    claude.push(Reply(content="8"))
    rated = await insert(system, agent["id"], text="Sam ran a marathon today.")
    assert rated["metadata"]["importance"] == 8
    assert rated["metadata"]["importance_source"] == "llm"
    assert "marathon" in json.dumps(claude.requests[-1]["messages"])
    assert llm.requests == []


async def test_search_ranking_follows_the_agents_memory_stream_weights(
    system: System, llm: FakeOpenAI
) -> None:
    # Scoring itself is unit-tested (tests/unit/test_memory_stream.py); here the
    # agent's own weights, set in its metadata, must reach the search.
    recency_first = {"w_recency": 1, "w_importance": 0, "w_relevance": 0.01}
    agent = await new_agent(system, embedding=EMBEDDING, metadata={"memory_stream": recency_first})
    aid = agent["id"]
    days_ago = lambda n: (datetime.now(UTC) - timedelta(days=n)).isoformat()  # noqa: E731
    for n in range(3):
        await insert(
            system, aid, text=f"unrelated filler {n}", created_at=days_ago(60), importance=5
        )
    await insert(
        system, aid, text="Sam allergy note: peanuts", created_at=days_ago(30), importance=9
    )
    await insert(system, aid, text="Sam allergy note: shellfish", importance=1)
    query = "Sam allergy note: peanuts"
    by_recency = await search(system, aid, query=query, top_k=2)
    assert [r["content"] for r in by_recency] == [
        "Sam allergy note: shellfish",
        "Sam allergy note: peanuts",
    ]
    # ranking=relevance (an O extension) ignores the weights for one search.
    relevance = await search(system, aid, query=query, ranking="relevance", top_k=1)
    assert [r["content"] for r in relevance] == [query]
    importance_first = {"w_recency": 0, "w_importance": 1, "w_relevance": 0.01}
    patched = await system.http.patch(
        f"/v1/agents/{aid}", json={"metadata": {"memory_stream": importance_first}}
    )
    assert patched.status_code == 200, patched.text
    assert [r["content"] for r in await search(system, aid, query="Sam", top_k=1)] == [query]
    # A bad setting is refused with a clear error and changes nothing.
    bad = await system.http.patch(
        f"/v1/agents/{aid}", json={"metadata": {"memory_stream": {"decay": 2}}}
    )
    assert bad.status_code == 400 and "decay" in bad.json()["detail"]
    kept = (await system.http.get(f"/v1/agents/{aid}")).json()["metadata"]
    assert kept == {"memory_stream": importance_first}
    created = await system.http.post(
        "/v1/agents/",
        json={"model": "openai/gpt-4o-mini", "metadata": {"memory_stream": {"w_x": 1}}},
    )
    assert created.status_code == 400 and "unknown key" in created.json()["detail"]


async def test_returned_memories_get_their_access_time_updated(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system, embedding=EMBEDDING)
    aid = agent["id"]
    hit = await insert(system, aid, text="parking spot is B12", importance=2)
    miss = await insert(system, aid, text="favourite colour is teal", importance=2)
    assert [r["id"] for r in await search(system, aid, query="parking", top_k=1)] == [hit["id"]]
    async with asyncio.timeout(10):
        while True:  # the access is one PassagesAccessed event, applied asynchronously
            rows = {
                r["id"]: r
                for r in (await system.http.get(f"/v1/agents/{aid}/archival-memory")).json()
            }
            if rows[hit["id"]]["metadata"]["last_accessed_at"] > hit["created_at"]:
                break
            await asyncio.sleep(0.05)
    assert rows[miss["id"]]["metadata"]["last_accessed_at"] == miss["metadata"]["last_accessed_at"]


async def test_reflection_writes_insights_citing_their_sources(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(
        system,
        embedding=EMBEDDING,
        metadata={"memory_stream": {"reflection_threshold": 10}},
    )
    aid = agent["id"]
    llm.push(Reply(content="Sam cares about healthy routines (because of 1, 2)\nnoise line"))
    first = await insert(system, aid, text="Sam jogs every morning", importance=6)
    second = await insert(system, aid, text="Sam cooks vegetables at night", importance=5)
    async with asyncio.timeout(15):
        while True:
            rows = (await system.http.get(f"/v1/agents/{aid}/archival-memory")).json()
            insights = [r for r in rows if r["metadata"]["kind"] == "reflection"]
            if insights:
                break
            await asyncio.sleep(0.05)
    (insight,) = insights
    assert insight["text"] == "Sam cares about healthy routines"
    assert insight["metadata"]["sources"] == [first["id"], second["id"]]
    assert insight["tags"] == ["reflection"]
    prompt = llm.requests[-1]["messages"][-1]["content"]
    assert "1. Sam jogs every morning" in prompt and "high-level insights" in prompt
    # The counter starts again: one more small memory does not reflect again.
    await insert(system, aid, text="Sam reads before bed", importance=2)
    assert len(llm.requests) == 1


async def test_agents_use_archival_tools(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system, agent_type="memgpt_agent", embedding=EMBEDDING)
    assert {"archival_memory_insert", "archival_memory_search"} <= {
        t["name"] for t in agent["tools"]
    }
    beat = {"request_heartbeat": True}  # memgpt agents go on after a tool only when asked
    llm.push(
        Reply(
            tool_calls=[
                (
                    "archival_memory_insert",
                    {"content": "Sam's locker code is 5521", "tags": ["sam"], **beat},
                )
            ]
        ),
        Reply(content="8"),  # the memory service asks the agent's LLM to rate importance
        Reply(
            tool_calls=[
                ("archival_memory_search", {"query": "locker code", "tags": ["sam"], **beat})
            ]
        ),
        Reply(tool_calls=[("archival_memory_search", {"query": " ", **beat})]),
        Reply(tool_calls=[("send_message", {"message": "Noted."})]),
    )
    result = await send(system, agent["id"], "remember my locker code 5521")
    returns = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
    assert returns[0]["status"] == "success"
    found = json.loads(returns[1]["tool_return"])
    assert found[0]["content"] == "Sam's locker code is 5521" and found[0]["tags"] == ["sam"]
    assert returns[2]["status"] == "error" and "query" in returns[2]["tool_return"]
    rows = (await system.http.get(f"/v1/agents/{agent['id']}/archival-memory")).json()
    assert [(r["text"], r["metadata"]["importance"]) for r in rows] == [
        ("Sam's locker code is 5521", 8)
    ]


async def test_an_agents_archive_goes_with_it(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system, embedding=EMBEDDING)
    await insert(system, agent["id"], text="to be forgotten", importance=3)
    deleted = await system.http.delete(f"/v1/agents/{agent['id']}")
    assert deleted.status_code == 200, deleted.text
    conn = await asyncpg.connect(system.env["DATABASE_URL"])
    try:
        left = await conn.fetchval("SELECT count(*) FROM passages WHERE agent_id = $1", agent["id"])
    finally:
        await conn.close()
    assert left == 0
    gone = await system.http.get(f"/v1/agents/{agent['id']}/archival-memory/search?query=x")
    assert gone.status_code == 404


async def test_agents_without_an_embedding_handle_use_the_local_model(
    system: System, llm: FakeOpenAI
) -> None:
    # The one e2e test that loads all-MiniLM-L6-v2 in the memory service (~5 s).
    agent = await new_agent(system)
    aid = agent["id"]
    home = await insert(system, aid, text="Sam's home is in Lisbon, near the river.", importance=5)
    await insert(system, aid, text="The quarterly budget review is on Friday.", importance=5)
    assert home["metadata"]["embedding_model"] == "local/all-MiniLM-L6-v2"
    found = await search(system, aid, query="Where does Sam live?", top_k=1)
    assert [r["content"] for r in found] == ["Sam's home is in Lisbon, near the river."]
    assert llm.embedding_requests == []  # nothing went to the provider


async def test_the_prompt_counts_archival_memories_and_their_tags(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system, embedding=EMBEDDING)
    await insert(system, agent["id"], text="Sam likes tea", tags=["sam", "food"], importance=4)
    await insert(system, agent["id"], text="Ada likes jazz", tags=["ada"], importance=4)
    llm.push(Reply(content="ok"))
    await send(system, agent["id"], "hello")
    prompt = llm.requests[-1]["messages"][0]["content"]
    assert "- 2 total memories you created are stored in archival memory" in prompt
    assert "- Available archival memory tags: ada, food, sam" in prompt


async def test_the_prompt_shows_the_archive_size_and_tags_as_they_change(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system, embedding=EMBEDDING)
    aid = agent["id"]
    first = await insert(system, aid, text="Locker code 1234", tags=["sam", "codes"], importance=3)
    await insert(system, aid, text="Sam likes tea", tags=["sam"], importance=3)
    await insert(system, aid, text="Untagged note", importance=3)
    llm.push(Reply(content="ok"))
    await send(system, aid, "hi")
    prompt = llm.requests[-1]["messages"][0]["content"]
    assert "- 3 total memories you created are stored in archival memory" in prompt
    assert "- Available archival memory tags: codes, sam" in prompt
    deleted = await system.http.delete(f"/v1/agents/{aid}/archival-memory/{first['id']}")
    assert deleted.status_code == 200, deleted.text
    llm.push(Reply(content="ok"))
    await send(system, aid, "again")
    prompt = llm.requests[-1]["messages"][0]["content"]
    assert "- 2 total memories you created are stored in archival memory" in prompt
    assert "- Available archival memory tags: sam" in prompt


async def test_the_embeddings_total_storage_size(system: System) -> None:
    """Letta's `GET /v1/embeddings/total_storage_size` (its unit in a header): what the
    passages' vectors take, 4 bytes a dimension."""

    async def size(unit: str | None = None) -> float:
        headers = {"storage_unit": unit} if unit else {}
        answer = await system.http.get("/v1/embeddings/total_storage_size", headers=headers)
        assert answer.status_code == 200, answer.text
        return float(answer.json())

    agent = await new_agent(system)  # the local model: 384 dimensions
    before = await size("B")
    await insert(system, agent["id"], text="first thing to keep")
    await insert(system, agent["id"], text="second thing to keep")
    after = await size("B")
    assert after - before >= 2 * 384 * 4
    assert 0 < await size() <= after / 1024**3
    refused = await system.http.get(
        "/v1/embeddings/total_storage_size", headers={"storage_unit": "PB"}
    )
    assert refused.status_code == 400 and "Invalid storage unit: PB" in refused.json()["detail"]


async def test_memories_waiting_for_their_rating_hold_up_no_memory_edit(
    system: System, llm: FakeOpenAI
) -> None:
    """An insert without an importance asks the agent's model to rate it, in the memory
    service's command handler. With the model holding twenty such ratings, an edit of a
    block (a fast command of the same consumer) is still answered."""
    agent = await new_agent(system, embedding=EMBEDDING)
    held = threading.Event()
    llm.default_reply = lambda _: Reply(content="5", release=held)
    inserts = [
        asyncio.create_task(insert(system, agent["id"], text=f"memory {n}")) for n in range(20)
    ]
    try:
        await until(llm, lambda reqs: len(reqs) >= 8)
        url = f"/v1/agents/{agent['id']}/core-memory/blocks/human"
        edited = await asyncio.wait_for(system.http.patch(url, json={"value": "Name: Sam!"}), 20)
        assert edited.status_code == 200, edited.text
        assert not held.is_set()
    finally:
        held.set()
    rated = [await asyncio.wait_for(t, 60) for t in inserts]
    assert sorted(p["text"] for p in rated) == sorted(f"memory {n}" for n in range(20))
