"""Self-evolution (issue 14) through the HTTP API against the five processes, with the
scripted LLM: a patch refused before any model call; a candidate proven in the shadow
on the agent's recorded runs (exactly two arm calls and two judge calls per case,
nothing written outside the evolution subject), approved, promoted and rolled back;
the decision chain verified, and a forged decision named."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.events import ProposalApproved
from o_evolution.judge import RUBRIC
from o_runtime.eventlog import EventLog
from tests.e2e.conftest import System
from tests.e2e.support import new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply

pytestmark = pytest.mark.e2e
RULE = "Always greet the user by name."
PREFIX = "/v1/agents/{}/evolution"


def scripted(body: dict[str, Any]) -> Reply:
    """The agent greets by name only when its system prompt says so; the judge prefers
    the answer that greets."""
    first = str(body["messages"][0].get("content"))
    if first == RUBRIC:
        prompt = str(body["messages"][-1]["content"])
        a = prompt.split("Answer A:\n", 1)[1].split("\n\nAnswer B:", 1)[0]
        return Reply(content="A" if a.startswith("Hello Sam") else "B")
    reply = echo_reply(body)
    if RULE in first:
        return Reply(content=f"Hello Sam! {reply.content}")
    return reply


async def counts(system: System, agent_id: str) -> tuple[int, int, int, int]:
    """What a shadow evaluation must leave alone: the agent's log subject, its runs and
    messages, and its blocks' versions."""
    eventlog = await EventLog.connect(system.env["NATS_URL"], name="test-evolution-counts")
    try:
        last = await eventlog.last_seq(subjects.agent_subject(agent_id))
    finally:
        await eventlog.close()
    runs = len((await system.http.get(f"/v1/runs/?agent_id={agent_id}&limit=1000")).json())
    messages = len((await system.http.get(f"/v1/agents/{agent_id}/messages?limit=1000")).json())
    agent = (await system.http.get(f"/v1/agents/{agent_id}")).json()
    values = sum(len(b["value"]) for b in agent["memory"]["blocks"])
    return last, runs, messages, values


async def test_a_candidate_is_proven_in_shadow_promoted_and_rolled_back(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = scripted
    agent = await new_agent(system)
    aid = agent["id"]
    base = PREFIX.format(aid)
    for i in range(9):
        await send(system, aid, f"question {i}")

    # Off by default: nothing is proposed.
    off = await system.http.post(f"{base}/proposals", json={})
    assert off.status_code == 409 and "evolution is off" in off.json()["detail"]
    config = await system.http.put(
        f"{base}/config",
        json={"enabled": True, "cases_per_evaluation": 9, "max_votes_per_conversation": 9},
    )
    assert config.status_code == 200, config.text
    assert config.json()["enabled"] is True

    # A patch touching the user's facts is refused before any model is asked.
    asked = len(llm.requests)
    human = await system.http.post(
        f"{base}/proposals",
        json={"patch": {"ops": [{"op": "append_text", "target": "block:human", "text": "x"}]}},
    )
    assert human.status_code == 422, human.text
    assert "human" in human.json()["detail"] and "protected" in human.json()["detail"]
    assert len(llm.requests) == asked

    made = await system.http.post(
        f"{base}/proposals",
        json={
            "patch": {
                "ops": [{"op": "append_text", "target": "system", "text": RULE}],
                "rationale": "users like being greeted",
            }
        },
    )
    assert made.status_code == 201, made.text
    proposal = made.json()
    assert proposal["status"] == "proposed" and proposal["source"] == "operator"
    assert [d["field"] for d in proposal["diff"]] == ["system"]
    assert f"+{RULE}" in proposal["diff"][0]["unified"]

    before = await counts(system, aid)
    asked = len(llm.requests)
    evaluated = await system.http.post(f"{base}/proposals/{proposal['id']}/evaluate")
    assert evaluated.status_code == 200, evaluated.text
    result = evaluated.json()
    assert result["status"] == "accepted", result["report"]
    assert result["report"]["wins"] == 9 and result["report"]["losses"] == 0
    assert len(result["cases"]) == 9
    assert all(c["outcome"] == "win" for c in result["cases"])
    assert all(c["candidate"]["answer"].startswith("Hello Sam") for c in result["cases"])
    assert {(c["judged_parent_first"], c["judged_candidate_first"]) for c in result["cases"]} == {
        ("B", "A")
    }
    # Two arms and two judgements per case, none asked twice.
    assert len(llm.requests) - asked == 9 * 4
    # Nothing of the shadow reached the agent's log, runs, messages or blocks.
    assert await counts(system, aid) == before

    approved = await system.http.post(f"{base}/proposals/{proposal['id']}/approve", json={})
    assert approved.json()["status"] == "approved"
    promoted = await system.http.post(f"{base}/proposals/{proposal['id']}/promote")
    assert promoted.status_code == 200, promoted.text
    assert promoted.json()["status"] == "promoted"
    served = (await system.http.get(f"/v1/agents/{aid}")).json()
    assert served["system"].endswith(RULE)
    reply = await send(system, aid, "after promotion")
    said = [m for m in reply["messages"] if m["message_type"] == "assistant_message"]
    assert said[-1]["content"].startswith("Hello Sam")

    # Rollback: the parent serves the next request.
    versions = (await system.http.get(f"{base}/versions")).json()
    assert versions["serving"] == proposal["candidate_version"]
    back = await system.http.post(
        f"{base}/rollback", json={"version_id": proposal["parent_version"]}
    )
    assert back.status_code == 200, back.text
    assert not (await system.http.get(f"/v1/agents/{aid}")).json()["system"].endswith(RULE)
    reply = await send(system, aid, "after rollback")
    said = [m for m in reply["messages"] if m["message_type"] == "assistant_message"]
    assert not said[-1]["content"].startswith("Hello Sam")

    # The decisions form one chain; a decision slipped in from outside breaks it there.
    history = (await system.http.get(f"{base}/history")).json()
    assert [h["type"] for h in history][:3] == [
        "EvolutionConfigured",
        "ProposalRefused",
        "ChangeProposed",
    ]
    assert history[-1]["type"] == "VersionRolledBack"
    assert all(h["prev_hash"] == p["hash"] for p, h in itertools.pairwise(history))
    verified = (await system.http.get(f"{base}/verify")).json()
    assert verified == {"ok": True, "links": len(history), "broken": None}

    eventlog = await EventLog.connect(system.env["NATS_URL"], name="test-evolution-forger")
    try:
        forged = ProposalApproved(
            agent_id=aid, proposal_id=proposal["id"], prev_hash=history[-1]["hash"], hash="0" * 64
        )
        appended = await eventlog.append(
            subjects.evolution_subject(aid),
            Envelope.wrap(forged, aggregate_id=aid, producer="intruder"),
        )
    finally:
        await eventlog.close()
    verified = (await system.http.get(f"{base}/verify")).json()
    assert verified["ok"] is False
    assert verified["broken"]["seq"] == appended.seq
    assert "hash" in verified["broken"]["reason"]
