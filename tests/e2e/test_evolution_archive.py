"""Evolution decisions in the agent's archival memory (issue 14): every decision but the
per-case CaseEvaluated becomes one passage tagged `evolution` that the agent finds by
searching, saying what was proposed, what the gate or a reviewer decided and why, and
what was promoted and rolled back; a decision delivered again inserts nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import nats
import nats.js.errors
import pytest
from nats.js.api import DeliverPolicy

from o_contracts import subjects
from o_contracts.envelope import decode
from o_contracts.events import PassageInserted
from o_contracts.projection_names import ARCHIVAL
from o_evolution.judge import RUBRIC
from o_memory.archival_handlers import ArchivalCommands
from o_memory.archive_handlers import ArchiveCommands
from o_memory.evolution_archive import EvolutionArchive
from o_memory.evolution_notes import TAG
from o_memory.service import MemoryService
from o_runtime.db import connect_pool
from o_runtime.env import Env
from o_runtime.eventlog import EventLog, Recorded
from o_runtime.reads import ProjectionReads
from o_runtime.settings import Settings
from o_runtime.waiting import ProjectionWatcher
from tests.e2e.conftest import System
from tests.e2e.support import DEADLINE, event_types, new_agent
from tests.e2e.test_evolution import agent_with_runs, decided
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply
from tests.servers import operator

pytestmark = pytest.mark.e2e
GREET = "Always greet the user by name."
RIDDLE = "Answer every question with a riddle."
PREFIX = "/v1/agents/{}/evolution"


def answer_score(answer: str) -> int:
    return 1 if answer.startswith("Hello Sam") else -1 if answer.startswith("Riddle:") else 0


def scripted(body: dict[str, Any]) -> Reply:
    """The agent greets or speaks in riddles when its system prompt says so; the judge
    prefers greetings and dislikes riddles."""
    first = str(body["messages"][0].get("content"))
    if first == RUBRIC:
        prompt = str(body["messages"][-1]["content"])
        a = prompt.split("Answer A:\n", 1)[1].split("\n\nAnswer B:\n", 1)[0]
        b = prompt.split("\n\nAnswer B:\n", 1)[1].split("\n\nWhich answer", 1)[0]
        score_a, score_b = answer_score(a), answer_score(b)
        return Reply(content="A" if score_a > score_b else "B" if score_b > score_a else "tie")
    reply = echo_reply(body)
    if GREET in first:
        return Reply(content=f"Hello Sam! {reply.content}")
    if RIDDLE in first:
        return Reply(content=f"Riddle: {reply.content}")
    return reply


def append(text: str, rationale: str) -> dict[str, Any]:
    return {
        "patch": {
            "ops": [{"op": "append_text", "target": "system", "text": text}],
            "rationale": rationale,
        }
    }


@asynccontextmanager
async def evolution_archive(system: System) -> AsyncIterator[EvolutionArchive]:
    """The memory service's reaction to decisions, in this process, on the system's NATS
    and Postgres: what a redelivered decision runs again."""
    settings = Settings(system.env["NATS_URL"], system.env["DATABASE_URL"], "test-memory")
    memory = MemoryService(settings, Env(system.env))
    memory.eventlog = await EventLog.connect(settings.nats_url, name="test-evolution-archive")
    memory.pool = await connect_pool(settings.database_url)
    memory.watcher = ProjectionWatcher(settings.database_url, memory.eventlog.nc)
    await memory.watcher.start()
    memory.reads = ProjectionReads(memory.pool, memory.watcher)
    try:
        yield EvolutionArchive(memory, ArchivalCommands(memory, ArchiveCommands(memory)))
    finally:
        await memory.watcher.stop()
        await memory.pool.close()
        await memory.eventlog.close()


async def decisions(system: System, agent_id: str) -> list[Recorded]:
    """The agent's evolution decisions, read off the log."""
    history = (await system.http.get(f"{PREFIX.format(agent_id)}/history")).json()
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        js = nc.jetstream()
        subject = subjects.evolution_subject(agent_id)
        out = []
        for h in history:
            msg = await js.get_msg(subjects.EVENTS_STREAM, seq=h["seq"])
            out.append(Recorded(h["seq"], subject, decode(msg.data or b"")))
        return out
    finally:
        await nc.close()


async def archival_events(system: System, agent_id: str) -> list[tuple[int, str]]:
    """(seq, type) of every event on the agent's archival subject."""
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        return await event_types(nc, subjects.archival_subject(agent_id))
    finally:
        await nc.close()


async def archived(system: System, agent_id: str, count: int) -> None:
    """Wait until `count` evolution passages were inserted for the agent (the reactor
    follows the decisions on its own) and the archival projection has applied them."""
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    inserted, last = 0, 0
    try:
        sub = await nc.jetstream().subscribe(
            subjects.archival_subject(agent_id),
            stream=subjects.EVENTS_STREAM,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        while inserted < count:
            msg = await sub.next_msg(timeout=DEADLINE)
            event = decode(msg.data)
            last = msg.metadata.sequence.stream
            if isinstance(event.data, PassageInserted) and event.data.passage.tags == [TAG]:
                inserted += 1
    finally:
        await nc.close()
    watcher = ProjectionWatcher(system.env["DATABASE_URL"])
    await watcher.start()
    try:
        await watcher.wait(last, ARCHIVAL, timeout=DEADLINE)
    finally:
        await watcher.stop()


async def passages(system: System, agent_id: str, search: str = "") -> list[dict[str, Any]]:
    params = {"limit": 1000} | ({"search": search} if search else {})
    response = await system.http.get(f"/v1/agents/{agent_id}/archival-memory", params=params)
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()
    return found


async def test_each_decision_reaches_the_agent_as_one_archival_passage(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = scripted
    aid, base = await agent_with_runs(system, 9)
    config = await system.http.put(
        f"{base}/config",
        json={"enabled": True, "cases_per_evaluation": 9, "max_votes_per_conversation": 9},
    )
    assert config.status_code == 200, config.text

    human = await system.http.post(
        f"{base}/proposals",
        json={"patch": {"ops": [{"op": "append_text", "target": "block:human", "text": "x"}]}},
    )
    assert human.status_code == 422, human.text
    (refused,) = (await system.http.get(f"{base}/proposals")).json()

    riddle = (
        await system.http.post(f"{base}/proposals", json=append(RIDDLE, "riddles amuse"))
    ).json()
    # (Mode shadow: each proposal is evaluated as soon as it is made.)
    judged = await decided(system, aid, riddle["id"])
    assert judged["status"] == "rejected", judged["report"]
    gate_reason = judged["report"]["reason"]
    reviewed = await system.http.post(
        f"{base}/proposals/{riddle['id']}/reject", json={"note": "riddles confuse users"}
    )
    assert reviewed.json()["status"] == "rejected", reviewed.text

    greet = (
        await system.http.post(f"{base}/proposals", json=append(GREET, "users like it"))
    ).json()
    accepted = await decided(system, aid, greet["id"])
    assert accepted["status"] == "accepted", accepted["report"]
    approved = await system.http.post(
        f"{base}/proposals/{greet['id']}/approve", json={"note": "greetings are friendly"}
    )
    assert approved.json()["status"] == "approved", approved.text
    promoted = await system.http.post(f"{base}/proposals/{greet['id']}/promote")
    assert promoted.json()["status"] == "promoted", promoted.text
    back = await system.http.post(
        f"{base}/rollback",
        json={"version_id": greet["parent_version"], "reason": "answers got too familiar"},
    )
    assert back.status_code == 200, back.text

    history = [h["type"] for h in (await system.http.get(f"{base}/history")).json()]
    kept = [t for t in history if t not in ("CaseEvaluated", "EvaluationStarted")]
    assert kept == [
        "EvolutionConfigured",
        "ProposalRefused",
        "ChangeProposed",
        "CandidateEvaluated",
        "ProposalRejected",
        "ChangeProposed",
        "CandidateEvaluated",
        "ProposalApproved",
        "VersionPromoted",
        "VersionRolledBack",
    ]
    await archived(system, aid, len(kept))
    listed = await passages(system, aid)
    assert all(p["tags"] == ["evolution"] for p in listed)
    texts = [p["text"] for p in listed]
    assert len(texts) == len(kept)
    about_riddle = f"proposal {riddle['id']} (source: operator) to append to system '{RIDDLE}'"
    about_greet = f"proposal {greet['id']} (source: operator) to append to system '{GREET}'"
    assert texts[0] == (
        "Evolution: evolution is on (mode shadow). Patches may change system, blocks, tools,"
        " tool_rules and model_settings; evolvable blocks: persona; at most 10 edits and 2000"
        " added characters per patch; 9 recorded runs per evaluation; approval before"
        " promotion: no."
    )
    assert "protected" in refused["reason"]
    assert texts[1] == (
        f"Evolution: proposal {refused['id']} (source: operator) to append to block human 'x'"
        f" was refused before evaluation: {refused['reason'].rstrip('.')}."
    )
    assert texts[2] == (
        f"Evolution: {about_riddle} was proposed. It would make version"
        f" {riddle['candidate_version']} from version {riddle['parent_version']}, served only"
        " once evaluated and promoted. Rationale: riddles amuse."
    )
    # The gate's reason, its tally and its slice table, with the patch and its rationale.
    report = judged["report"]
    assert texts[3].startswith(
        f"Evolution: {about_riddle} was rejected by the gate: {gate_reason}"
    ), texts[3]
    assert f" Cases: 0 wins, {report['losses']} losses, 0 ties, 0 inconclusive." in texts[3]
    assert report["slices"] and " Slices: " in texts[3]
    for s in report["slices"]:
        assert f"{s['name']}: {s['cases']} cases, 0 wins, {s['losses']} losses" in texts[3]
    assert texts[3].endswith(" Rationale: riddles amuse.")
    assert texts[4] == (
        f"Evolution: {about_riddle} was rejected by a reviewer: riddles confuse users."
        " Rationale: riddles amuse."
    )
    assert texts[6].startswith(
        f"Evolution: {about_greet} was accepted by the gate: the candidate is better: 9 wins,"
        " 0 losses"
    )
    assert texts[7] == (
        f"Evolution: {about_greet} was approved by a reviewer: greetings are friendly."
        " Rationale: users like it."
    )
    assert texts[8] == (
        f"Evolution: {about_greet} was promoted: version {greet['candidate_version']} is"
        f" served from the next request on, replacing version {greet['parent_version']}."
        " Rationale: users like it."
    )
    assert texts[9] == (
        f"Evolution: rolled back to version {greet['parent_version']}, served from the next"
        f" request on, replacing version {greet['candidate_version']}. That version came"
        f" from {about_greet}; that change is undone. Asked for by an operator: answers got"
        " too familiar."
    )
    assert [p["metadata"]["importance"] for p in listed] == [4, 6, 4, 7, 7, 4, 6, 5, 7, 8]

    # Found as the agent finds memories: by meaning and words, filtered by the tag.
    found = await system.http.get(
        f"/v1/agents/{aid}/archival-memory/search",
        params={"query": "rejected by the gate", "tags": ["evolution"], "top_k": 20},
    )
    assert found.status_code == 200, found.text
    results = found.json()["results"]
    assert texts[3] in [r["content"] for r in results]
    assert all(r["tags"] == ["evolution"] for r in results)
    assert [p["text"] for p in await passages(system, aid, search="rolled back")] == [texts[9]]


async def test_a_decision_delivered_again_inserts_nothing(system: System) -> None:
    """The reaction run again on the recorded decisions (as after a lost ack, however
    late): nothing appended; a passage deleted since stays deleted; nothing for an agent
    deleted since."""
    agent = await new_agent(system)
    aid = agent["id"]
    base = PREFIX.format(aid)
    assert (await system.http.put(f"{base}/config", json={"enabled": True})).status_code == 200
    made = await system.http.post(f"{base}/proposals", json=append("Be brief.", "shorter"))
    assert made.status_code == 201, made.text
    # (Evaluated at once: with no runs to replay, inconclusive.)
    await decided(system, aid, made.json()["id"])
    rejected = await system.http.post(
        f"{base}/proposals/{made.json()['id']}/reject", json={"note": "not now"}
    )
    assert rejected.status_code == 200, rejected.text
    await archived(system, aid, 4)
    before = await archival_events(system, aid)
    listed = await passages(system, aid)
    assert [p["text"].split(":", 1)[0] for p in listed] == ["Evolution"] * 4

    recorded = await decisions(system, aid)
    assert [r.envelope.type for r in recorded] == [
        "EvolutionConfigured",
        "ChangeProposed",
        "EvaluationStarted",
        "CandidateEvaluated",
        "ProposalRejected",
    ]
    async with evolution_archive(system) as archive:
        await archive.on_decisions(recorded)
        await archive.on_decisions(recorded)
        assert await archival_events(system, aid) == before
        assert await passages(system, aid) == listed

        # A passage deleted since stays deleted.
        gone = listed[2]["id"]
        deleted = await system.http.delete(f"/v1/agents/{aid}/archival-memory/{gone}")
        assert deleted.status_code == 200, deleted.text
        after_delete = await archival_events(system, aid)
        assert after_delete[-1][1] == "PassageDeleted"
        await archive.on_decisions(recorded)
        assert await archival_events(system, aid) == after_delete
        assert [p["id"] for p in await passages(system, aid)] == [
            p["id"] for p in listed if p["id"] != gone
        ]

        # An agent deleted since gets nothing.
        assert (await system.http.delete(f"/v1/agents/{aid}")).status_code == 200
        await archive.on_decisions(recorded)
        assert await archival_events(system, aid) == after_delete
    pool: asyncpg.Pool = await connect_pool(system.env["DATABASE_URL"])
    try:
        left = await pool.fetchval("SELECT count(*) FROM passages WHERE agent_id = $1", aid)
    finally:
        await pool.close()
    assert left == 0
