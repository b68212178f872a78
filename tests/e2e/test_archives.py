"""Archives: archival passages agents share (Letta's `/v1/archives/`), through the official
client and HTTP: made, filled, attached to two agents, written to by an agent's own tool,
found by the other, detached, emptied and deleted; bad requests refused with nothing
appended; a retried request made once.

Agents embed with `openai/text-embedding-3-small` against the local OpenAI-protocol server
(hash vectors, no meaning): what is found by words is found through full-text search.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import letta_client
import pytest
from nats.js.api import DeliverPolicy

from o_contracts import subjects
from o_contracts.envelope import decode
from o_contracts.events import PassageInserted
from o_executor.shadow.snapshot import take_snapshot
from o_memory.evolution_notes import TAG
from o_runtime.eventlog import EventLog
from tests.e2e.conftest import System
from tests.e2e.support import DEADLINE, connected, event_types, new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e
EMBEDDING = "openai/text-embedding-3-small"
# Names of this module's own (other tests make archives in the same system).
ONCE = f"once-{uuid.uuid4().hex[:8]}"


def client_scenario(system: System, agents: list[str]) -> dict[str, Any]:
    """What a Letta app does with an archive, through letta_client."""
    client = system.client()
    archive = client.archives.create(
        name="team-wiki", description="what the team knows", embedding=EMBEDDING
    )
    for agent_id in agents:
        client.agents.archives.attach(archive.id, agent_id=agent_id)
    one = client.archives.passages.create(
        archive.id, text="The vault code is QZ-9931.", tags=["ops"], metadata={"from": "wiki"}
    )
    many = client.archives.passages.create_many(
        archive.id,
        passages=[
            {"text": "Deploys happen on Tuesdays."},
            {"text": "The on-call phone is in the blue drawer.", "tags": ["ops"]},
        ],
    )
    renamed = client.archives.update(archive.id, name="team-wiki-2")
    return {
        "archive": archive,
        "one": one,
        "many": many,
        "renamed": renamed,
        "retrieved": client.archives.retrieve(archive.id),
        "by_agent": list(client.archives.list(agent_id=agents[0])),
        "by_name": list(client.archives.list(name="team-wiki-2")),
    }


async def memory_of(system: System, agent_id: str) -> list[dict[str, Any]]:
    response = await system.http.get(f"/v1/agents/{agent_id}/archival-memory")
    assert response.status_code == 200, response.text
    return list(response.json())


async def found(system: System, agent_id: str, query: str) -> list[str]:
    response = await system.http.get(
        f"/v1/agents/{agent_id}/archival-memory/search", params={"query": query}
    )
    assert response.status_code == 200, response.text
    return [r["content"] for r in response.json()["results"]]


async def test_an_archive_shared_by_two_agents(system: System, llm: FakeOpenAI) -> None:
    http = system.http
    writer = await new_agent(system, agent_type="memgpt_agent", embedding=EMBEDDING)
    reader = await new_agent(system, embedding=EMBEDDING)
    own = await http.post(
        f"/v1/agents/{reader['id']}/archival-memory",
        json={"text": "The reader's own note about lunch.", "importance": 3},
    )
    assert own.status_code == 200, own.text

    r = await asyncio.to_thread(client_scenario, system, [writer["id"], reader["id"]])
    archive = r["archive"]
    assert archive.id.startswith("archive-") and archive.name == "team-wiki"
    assert archive.embedding_config is not None and archive.embedding_config.handle == EMBEDDING
    assert r["one"].archive_id == archive.id and r["one"].tags == ["ops"]
    assert r["one"].metadata is not None and r["one"].metadata["from"] == "wiki"
    assert [p.text for p in r["many"]] == [
        "Deploys happen on Tuesdays.",
        "The on-call phone is in the blue drawer.",
    ]
    assert r["renamed"].name == r["retrieved"].name == "team-wiki-2"
    assert r["retrieved"].description == "what the team knows"
    assert [a.id for a in r["by_agent"]] == [a.id for a in r["by_name"]] == [archive.id]
    agents = (await http.get(f"/v1/archives/{archive.id}/agents")).json()
    assert {a["id"] for a in agents} == {writer["id"], reader["id"]}

    # The reader's archival memory: its own passage and the archive's.
    texts = {p["text"] for p in await memory_of(system, reader["id"])}
    assert texts == {
        "The reader's own note about lunch.",
        "The vault code is QZ-9931.",
        "Deploys happen on Tuesdays.",
        "The on-call phone is in the blue drawer.",
    }
    assert (await found(system, reader["id"], "QZ-9931"))[0] == "The vault code is QZ-9931."

    # The writer's own tool writes into the archive, where the reader finds it.
    beat = {"request_heartbeat": True}
    llm.push(
        Reply(tool_calls=[("archival_memory_insert", {"content": "Sam owns KX-7 keys", **beat})]),
        Reply(content="7"),  # the memory service asks the writer's model to rate it
        Reply(tool_calls=[("send_message", {"message": "Noted."})]),
    )
    await send(system, writer["id"], "remember that Sam owns the KX-7 keys")
    assert (await found(system, reader["id"], "KX-7"))[0] == "Sam owns KX-7 keys"
    (written,) = [p for p in await memory_of(system, reader["id"]) if "KX-7" in p["text"]]
    assert written["archive_id"] == archive.id and written["agent_id"] == writer["id"]
    assert written["metadata"]["importance"] == 7

    # The reader's prompt counts its own passage and the archive's four.
    llm.push(Reply(tool_calls=[("send_message", {"message": "hi"})]))
    await send(system, reader["id"], "hello")
    system_prompt = llm.requests[-1]["messages"][0]["content"]
    assert "5 total memories" in system_prompt, system_prompt

    # A shadow replay's snapshot of the reader holds the same five (folded from the log).
    eventlog = await EventLog.connect(system.env["NATS_URL"], name="archives-test")
    try:
        end = (await eventlog.js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
        snapshot = await take_snapshot(eventlog, reader["id"], end)
    finally:
        await eventlog.close()
    assert snapshot.core_memory()["archival_count"] == 5
    assert snapshot.core_memory()["archival_tags"] == ["ops"]

    # An agent deleting one of the archive's passages deletes it for both.
    gone = await http.delete(f"/v1/agents/{reader['id']}/archival-memory/{r['one'].id}")
    assert gone.status_code == 200, gone.text
    assert "The vault code is QZ-9931." not in {
        p["text"] for p in await memory_of(system, writer["id"])
    }

    # Detached, the reader keeps only its own.
    detached = await http.patch(f"/v1/agents/{reader['id']}/archives/detach/{archive.id}")
    assert detached.status_code == 200 and detached.json() is None, detached.text
    assert [p["text"] for p in await memory_of(system, reader["id"])] == [
        "The reader's own note about lunch."
    ]
    # Deleting a passage through the archive; then the archive itself.
    (tuesdays,) = [p for p in r["many"] if "Tuesdays" in p.text]
    deleted = await http.delete(f"/v1/archives/{archive.id}/passages/{tuesdays.id}")
    assert deleted.status_code == 204, deleted.text
    assert "Deploys happen on Tuesdays." not in {
        p["text"] for p in await memory_of(system, writer["id"])
    }
    assert (await http.delete(f"/v1/archives/{archive.id}")).status_code == 204
    assert (await http.get(f"/v1/archives/{archive.id}")).status_code == 404
    assert await memory_of(system, writer["id"]) == []
    assert (await http.get("/v1/archives/", params={"agent_id": writer["id"]})).json() == []

    async with connected(system) as nc:
        on_archive = [t for _, t in await event_types(nc, subjects.archive_subject(archive.id))]
        attached = [
            t for _, t in await event_types(nc, subjects.agent_archives_filter(reader["id"]))
        ]
    assert on_archive == [
        "ArchiveCreated",
        "ArchivePassagesInserted",
        "ArchivePassagesInserted",
        "ArchiveUpdated",
        "ArchivePassagesInserted",  # the writer's memory
        "ArchivePassageDeleted",
        "ArchivePassageDeleted",
        "ArchiveDeleted",
    ]
    assert attached == ["ArchiveAttached", "ArchiveDetached"]


async def test_bad_archive_requests_are_refused_and_append_nothing(
    system: System, llm: FakeOpenAI
) -> None:
    http = system.http
    agent = await new_agent(system, embedding=EMBEDDING)
    made = await http.post("/v1/archives/", json={"name": "kept", "embedding": EMBEDDING})
    assert made.status_code == 200, made.text
    archive = made.json()["id"]
    other = (await http.post("/v1/archives/", json={"name": "other"})).json()["id"]
    theirs = (await http.post(f"/v1/archives/{other}/passages", json={"text": "not yours"})).json()
    missing = "archive-00000000-0000-4000-8000-000000000000"
    nobody = "agent-00000000-0000-4000-8000-000000000000"
    async with connected(system) as nc:
        before = await event_types(nc, subjects.archive_subject(archive))
    cases = [
        (await http.post("/v1/archives/", json={}), 422),
        (await http.post("/v1/archives/", json={"name": ""}), 422),
        (await http.post("/v1/archives/", json={"name": "x", "embedding": "nohandle"}), 400),
        (await http.post("/v1/archives/", json={"name": "x", "embedding": "nope/nope"}), 400),
        (
            await http.post(
                "/v1/archives/", json={"name": "x", "embedding_config": {"embedding_model": "e"}}
            ),
            422,
        ),
        (await http.get("/v1/archives/", params={"agent_id": nobody}), 404),
        (await http.get(f"/v1/archives/{missing}"), 404),
        (await http.get("/v1/archives/archive-xyz"), 422),
        (await http.patch(f"/v1/archives/{missing}", json={"name": "y"}), 404),
        (await http.delete(f"/v1/archives/{missing}"), 404),
        (await http.post(f"/v1/archives/{archive}/passages", json={"text": ""}), 422),
        (await http.post(f"/v1/archives/{archive}/passages", json={"text": "  "}), 400),
        (
            await http.post(f"/v1/archives/{archive}/passages", json={"text": "x", "tags": [""]}),
            400,
        ),
        (await http.post(f"/v1/archives/{missing}/passages", json={"text": "x"}), 404),
        (await http.post(f"/v1/archives/{archive}/passages/batch", json={"passages": []}), 422),
        (
            await http.post(
                f"/v1/archives/{archive}/passages/batch",
                json={"passages": [{"text": "x"}] * 65},
            ),
            422,
        ),
        (
            await http.post(
                f"/v1/archives/{archive}/passages/batch",
                json={"passages": [{"text": "y" * 200_000}, {"text": "z" * 200_000}]},
            ),
            422,
        ),
        (await http.delete(f"/v1/archives/{archive}/passages/{theirs['id']}"), 400),
        (
            await http.delete(
                f"/v1/archives/{archive}/passages/passage-00000000-0000-4000-8000-000000000000"
            ),
            404,
        ),
        (
            await http.patch(f"/v1/agents/{nobody}/archives/attach/{archive}"),
            404,
        ),
        (await http.patch(f"/v1/agents/{agent['id']}/archives/attach/{missing}"), 404),
    ]
    for response, status in cases:
        assert response.status_code == status, (response.request.url, response.text)
        assert isinstance(response.json()["detail"], str | list), response.text
    async with connected(system) as nc:
        assert await event_types(nc, subjects.archive_subject(archive)) == before
    assert (await http.delete(f"/v1/archives/{archive}/passages/{theirs['id']}")).json()[
        "detail"
    ] == f"Passage {theirs['id']} does not belong to archive {archive}"


async def test_a_retried_request_makes_one_archive_and_one_passage(
    system: System, llm: FakeOpenAI
) -> None:
    http = system.http
    key = {"Idempotency-Key": f"archive-retry-{ONCE}"}
    first = await http.post("/v1/archives/", json={"name": ONCE}, headers=key)
    again = await http.post("/v1/archives/", json={"name": ONCE}, headers=key)
    assert first.status_code == again.status_code == 200, again.text
    archive = first.json()["id"]
    assert again.json()["id"] == archive
    assert [a["id"] for a in (await http.get("/v1/archives/", params={"name": ONCE})).json()] == [
        archive
    ]
    # A passage with the local model (no embedding named): found by meaning.
    body = {"text": "The lighthouse keeper lives on the northern cliff."}
    p1 = await http.post(f"/v1/archives/{archive}/passages", json=body, headers=key)
    p2 = await http.post(f"/v1/archives/{archive}/passages", json=body, headers=key)
    assert p1.json()["id"] == p2.json()["id"], p2.text
    assert p1.json()["embedding_config"]["handle"] == "local/all-MiniLM-L6-v2"
    async with connected(system) as nc:
        types = [t for _, t in await event_types(nc, subjects.archive_subject(archive))]
    assert types == ["ArchiveCreated", "ArchivePassagesInserted"]

    agent = await new_agent(system)
    attach = await http.patch(f"/v1/agents/{agent['id']}/archives/attach/{archive}")
    assert attach.status_code == 200, attach.text
    # Attached twice: one attachment (each request recorded, so that one delivered again
    # after a detach is answered from its record instead of attaching again).
    assert (await http.patch(f"/v1/agents/{agent['id']}/archives/attach/{archive}")).json() is None
    async with connected(system) as nc:
        attached = await event_types(nc, subjects.agent_archives_filter(agent["id"]))
    assert [t for _, t in attached] == ["ArchiveAttached", "ArchiveAttached"]
    listed = (await http.get("/v1/archives/", params={"agent_id": agent["id"]})).json()
    assert [a["id"] for a in listed] == [archive]
    hits = await found(system, agent["id"], "Who lives by the sea cliffs?")
    assert hits[:1] == ["The lighthouse keeper lives on the northern cliff."]

    await http.post(f"/v1/archives/{archive}/passages", json={"text": "Tea is served at four."})

    # Letta's passage search, through the official client: one archive's passages by
    # meaning, an agent's, and every passage newest first without a query; an archive
    # that is not there is a 404.
    def searches() -> dict[str, Any]:
        client = system.client()
        with pytest.raises(letta_client.NotFoundError):
            client.archives.retrieve("archive-00000000-0000-4000-8000-000000000000")
        with pytest.raises(letta_client.NotFoundError):
            client.passages.search(
                query="x", archive_id="archive-00000000-0000-4000-8000-000000000000"
            )
        return {
            "archive": client.passages.search(
                query="Who lives by the sea cliffs?", archive_id=archive
            ),
            "agent": client.passages.search(query="When is tea?", agent_id=agent["id"], limit=1),
            "oldest": client.passages.search(archive_id=archive, limit=2),
            "everywhere": client.passages.search(query="lighthouse keeper cliff", limit=100),
        }

    r = await asyncio.to_thread(searches)
    assert r["archive"][0].passage.text == "The lighthouse keeper lives on the northern cliff."
    assert r["archive"][0].passage.archive_id == archive and r["archive"][0].score > 0
    assert [x.passage.text for x in r["agent"]] == ["Tea is served at four."]
    assert [x.passage.text for x in r["oldest"]] == [
        "The lighthouse keeper lives on the northern cliff.",
        "Tea is served at four.",
    ]
    # Every passage, whichever model embedded it: the local model's among the others'.
    assert "The lighthouse keeper lives on the northern cliff." in {
        x.passage.text for x in r["everywhere"]
    }
    assert json.loads((await http.get(f"/v1/archives/{archive}")).text)["name"] == ONCE


async def test_what_an_agent_records_of_its_own_evolution_stays_its_own(
    system: System, llm: FakeOpenAI
) -> None:
    """With an archive attached, the memory service's note of the agent's own evolution
    decision goes into the agent's own memory, not into the archive others share."""
    http = system.http
    agent = await new_agent(system, embedding=EMBEDDING)
    archive = (await http.post("/v1/archives/", json={"name": f"shared-{ONCE}"})).json()["id"]
    attached = await http.patch(f"/v1/agents/{agent['id']}/archives/attach/{archive}")
    assert attached.status_code == 200, attached.text
    config = await http.put(f"/v1/agents/{agent['id']}/evolution/config", json={"enabled": True})
    assert config.status_code == 200, config.text
    # The note comes from the memory service following the decision: wait for its event.
    async with connected(system) as nc:
        sub = await nc.jetstream().subscribe(
            subjects.archival_subject(agent["id"]),
            stream=subjects.EVENTS_STREAM,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        msg = await sub.next_msg(timeout=DEADLINE)
        inserted = decode(msg.data).data
        assert isinstance(inserted, PassageInserted) and inserted.passage.tags == [TAG]
        on_archive = await event_types(nc, subjects.archive_subject(archive))
    assert [t for _, t in on_archive] == ["ArchiveCreated"]
