"""Self-evolution (issue 14) through the HTTP API against the five processes, with the
scripted LLM: a patch refused before any model call; a candidate proven in the shadow
on the agent's recorded runs (exactly two arm calls and two judge calls per case,
nothing written outside the evolution subject), approved, promoted and rolled back;
the decision chain verified, and a forged decision named."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import threading
from typing import Any

import asyncpg
import pytest

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.events import ProposalApproved
from o_contracts.evolution import EvolutionConfig
from o_contracts.evolution_commands import ConfigureEvolution, ProposeChange
from o_contracts.ids import derived_id, new_id
from o_contracts.projection_names import EVOLUTION, MEMORY
from o_evolution import proposer
from o_evolution.judge import RUBRIC
from o_executor.shadow import checkpoint_codec
from o_executor.shadow.snapshot import Checkpoint
from o_runtime.commands import send_and_wait
from o_runtime.eventlog import EventLog
from tests.e2e.conftest import System
from tests.e2e.support import (
    evolution_events,
    forgotten,
    log_end,
    new_agent,
    projected,
    projected_past,
    send,
    short_dedup_window,
    until,
)
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


async def decided(
    system: System, agent_id: str, proposal_id: str, decision: str = "CandidateEvaluated"
) -> dict[str, Any]:
    """The proposal once `decision` about it is recorded and projected."""
    async with evolution_events(system, agent_id) as events:
        await events.wait_until(
            lambda e: e.type == decision and getattr(e.data, "proposal_id", None) == proposal_id
        )
        await projected(system, events.last_seq, EVOLUTION)
    got = await system.http.get(f"/v1/agents/{agent_id}/evolution/proposals/{proposal_id}")
    proposal: dict[str, Any] = got.json()
    return proposal


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
    aid, base = await agent_with_runs(system, 9)

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

    before = await counts(system, aid)
    asked = len(llm.requests)
    # (Mode shadow, the default: the proposal is evaluated as soon as it is made.)
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
    assert proposal["status"] in ("proposed", "evaluating") and proposal["source"] == "operator"
    assert [d["field"] for d in proposal["diff"]] == ["system"]
    assert f"+{RULE}" in proposal["diff"][0]["unified"]

    result = await decided(system, aid, proposal["id"])
    # Asking again changes nothing: the decision stands.
    again = await system.http.post(f"{base}/proposals/{proposal['id']}/evaluate")
    assert again.status_code == 202 and again.json()["status"] == "accepted"
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
    assert verified == {
        "ok": True,
        "links": len(history),
        "broken": None,
        "last_hash": history[-1]["hash"],
    }

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


async def agent_with_runs(system: System, n: int) -> tuple[str, str]:
    """A new agent that answered `n` questions ("question 0", ...), and its evolution
    routes' prefix."""
    aid = str((await new_agent(system))["id"])
    for i in range(n):
        await send(system, aid, f"question {i}")
    return aid, PREFIX.format(aid)


def canary_config(**changes: Any) -> dict[str, Any]:
    """Evolution in mode canary over nine cases, in two steps (50 and 100 %)."""
    base = {
        "enabled": True,
        "mode": "canary",
        "cases_per_evaluation": 9,
        "max_votes_per_conversation": 9,
        "canary_steps": [50, 100],
    }
    return base | changes


async def rollout_of(system: System, agent_id: str) -> dict[str, Any]:
    rollouts = (await system.http.get(PREFIX.format(agent_id) + "/rollouts")).json()
    assert len(rollouts) == 1, rollouts
    rollout: dict[str, Any] = rollouts[0]
    return rollout


async def test_a_canary_advances_step_by_step_and_promotes_the_candidate(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = scripted
    aid, base = await agent_with_runs(system, 9)
    config = canary_config(analysis_every=3)
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    patch = {"ops": [{"op": "append_text", "target": "system", "text": RULE}]}
    pid = (await system.http.post(f"{base}/proposals", json={"patch": patch})).json()["id"]
    assert (await decided(system, aid, pid))["status"] == "accepted"
    # The approval gate (on by default) holds the canary until a person approves.
    assert (await system.http.get(f"{base}/rollouts")).json() == []
    approved = await system.http.post(f"{base}/proposals/{pid}/approve", json={})
    assert approved.status_code == 200, approved.text
    assert (await decided(system, aid, pid, "RolloutStarted"))["status"] == "canary"
    rollout = await rollout_of(system, aid)
    assert rollout["weight"] == 50 and rollout["status"] == "running"

    # Live traffic: each message on the default conversation is split by its run.
    arms: dict[str, list[bool]] = {"candidate": [], "stable": []}
    for i in range(80):
        reply = await send(system, aid, f"live {i}")
        said = [m for m in reply["messages"] if m["message_type"] == "assistant_message"]
        greeted = said[-1]["content"].startswith("Hello Sam")
        arm = "candidate" if greeted else "stable"
        arms[arm].append(greeted)
        if (await rollout_of(system, aid))["status"] != "running":
            break
    promoted = await decided(system, aid, pid, "VersionPromoted")
    assert promoted["status"] == "promoted"
    # The candidate is the agent before its promotion is recorded: no run between the
    # two falls back to the stable version.
    rollout = await rollout_of(system, aid)
    assert rollout["status"] == "promoted" and rollout["weight"] == 100
    assert [(d["type"], d["weight"]) for d in rollout["decisions"]] == [
        ("RolloutStarted", 50),
        ("RolloutAdvanced", 100),
        ("RolloutCompleted", None),
    ]
    advanced = rollout["decisions"][1]
    assert advanced["candidate"]["runs"] == 3 and advanced["candidate"]["errors"] == 0
    # The sampled judge: two live candidate answers preferred to the stable agent's.
    assert (advanced["candidate"]["judge_wins"], advanced["candidate"]["judge_losses"]) == (2, 0)
    assert advanced["stable"]["errors"] == 0
    assert len(arms["candidate"]) >= 6  # three at 50 %, three at 100 %
    assert (await system.http.get(f"/v1/agents/{aid}")).json()["system"].endswith(RULE)
    reply = await send(system, aid, "after the canary")
    said = [m for m in reply["messages"] if m["message_type"] == "assistant_message"]
    assert said[-1]["content"].startswith("Hello Sam")
    history = [h["type"] for h in (await system.http.get(f"{base}/history")).json()]
    assert history[-5:] == [
        "ProposalApproved",
        "RolloutStarted",
        "RolloutAdvanced",
        "RolloutCompleted",
        "VersionPromoted",
    ]
    assert (await system.http.get(f"{base}/verify")).json()["ok"] is True


FLAKY = "Answer every other live question with an error."


def failing_candidate(body: dict[str, Any]) -> Reply:
    """The candidate (its system prompt carries FLAKY) fails every odd live question; the
    shadow's replays of earlier questions are fine, so the gate accepts it."""
    first = str(body["messages"][0].get("content"))
    if first == RUBRIC:  # (the judge prefers the candidate's eager answer)
        prompt = str(body["messages"][-1]["content"])
        a = prompt.split("Answer A:\n", 1)[1].split("\n\nAnswer B:", 1)[0]
        return Reply(content="A" if a.startswith("Sure!") else "B")
    last = str(body["messages"][-1].get("content"))
    if FLAKY not in first:
        return echo_reply(body)
    if "live" in last and int(last.rsplit(" ", 1)[-1]) % 2:
        return Reply(status=400, error_message="the candidate broke")
    return Reply(content=f"Sure! {echo_reply(body).content}")


async def test_a_canary_failing_half_its_runs_is_aborted_within_two_intervals(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = failing_candidate
    aid, base = await agent_with_runs(system, 9)
    config = canary_config(approval_before_canary=False, analysis_every=4)
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    patch = {"ops": [{"op": "append_text", "target": "system", "text": FLAKY}]}
    pid = (await system.http.post(f"{base}/proposals", json={"patch": patch})).json()["id"]
    # Accepted, and (no approval gate) the canary starts by itself.
    assert (await decided(system, aid, pid, "RolloutStarted"))["status"] == "canary"
    for i in range(80):
        await send(system, aid, f"live {i}")
        if (await rollout_of(system, aid))["status"] != "running":
            break
    aborted = await decided(system, aid, pid, "RolloutAborted")
    # (By the failure limit, or by the error rate at the first analysis: which comes
    # first depends on which live questions the candidate drew.)
    assert aborted["status"] == "aborted"
    assert aborted["reason"].startswith(("failure limit", "error rate")), aborted["reason"]
    rollout = await rollout_of(system, aid)
    assert rollout["weight"] == 0 and rollout["status"] == "aborted"
    last = rollout["decisions"][-1]
    assert last["type"] == "RolloutAborted"
    # Within two analysis intervals of candidate runs.
    assert last["candidate"]["runs"] <= 2 * 4 and last["candidate"]["errors"] >= 1
    # Every conversation is back on the stable agent, which never fails.
    for i in range(1, 8, 2):
        reply = await send(system, aid, f"live {i}")
        said = [m for m in reply["messages"] if m["message_type"] == "assistant_message"]
        assert said[-1]["content"] == f"echo: live {i}"
    assert not (await system.http.get(f"/v1/agents/{aid}")).json()["system"].endswith(FLAKY)


async def test_an_exhausted_budget_stops_evolution_and_users_runs_still_answer(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = scripted
    aid = (await new_agent(system))["id"]
    base = PREFIX.format(aid)
    for i in range(4):
        await send(system, aid, f"question {i}")
    # One case (two arms and two judgements) costs more than this.
    config = {"enabled": True, "tokens_per_day": 100, "max_votes_per_conversation": 9}
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    patch = {"ops": [{"op": "append_text", "target": "system", "text": RULE}]}
    async with evolution_events(system, aid) as events:
        pid = (await system.http.post(f"{base}/proposals", json={"patch": patch})).json()["id"]
        exhausted = await events.wait_until(lambda e: e.type == "EvolutionBudgetExhausted")
        await projected(system, events.last_seq, EVOLUTION)
    assert "tokens_per_day" in exhausted.data.reason
    proposal = (await system.http.get(f"{base}/proposals/{pid}")).json()
    # Stopped after the case that spent the budget, never decided.
    assert proposal["status"] == "evaluating" and len(proposal["cases"]) == 1
    asked = len(llm.requests)
    drafted = await system.http.post(f"{base}/proposals", json={})
    assert drafted.status_code == 429 and "budget" in drafted.json()["detail"]
    assert len(llm.requests) == asked
    # The agent itself is untouched.
    reply = await send(system, aid, "still there?")
    said = [m for m in reply["messages"] if m["message_type"] == "assistant_message"]
    assert said[-1]["content"] == "echo: still there?"
    history = [h["type"] for h in (await system.http.get(f"{base}/history")).json()]
    assert history.count("EvolutionBudgetExhausted") == 1


def proposing(body: dict[str, Any]) -> Reply:
    """The agent's model, asked for a proposal, drafts one that greets users by name."""
    if str(body["messages"][0].get("content")) == proposer.INSTRUCTIONS:
        patch = {
            "rationale": "greet users",
            "ops": [{"op": "append_text", "target": "system", "text": RULE}],
        }
        return Reply(content=json.dumps(patch))
    return scripted(body)


async def test_a_sleeptime_turn_asks_for_a_proposal_drafted_from_recent_runs(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = proposing
    client = system.client()
    agent = await asyncio.to_thread(
        client.agents.create,
        model="openai/gpt-4o-mini",
        memory_blocks=[{"label": "persona", "value": "Helpful."}],
        enable_sleeptime=True,
    )
    base = PREFIX.format(agent.id)
    config = {"enabled": True, "mode": "propose_only", "min_seconds_between_proposals": 3600}
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    async with evolution_events(system, agent.id) as events:
        first = await send(system, agent.id, "hello")
        proposed = await events.wait_until(lambda e: e.type == "ChangeProposed")
        await projected(system, events.last_seq, EVOLUTION)
    assert proposed.data.source == "sleeptime"
    assert proposed.data.patch.ops[0].text == RULE  # type: ignore[union-attr]
    assert first["messages"][-1]["run_id"] in proposed.data.run_ids
    listed = (await system.http.get(f"{base}/proposals")).json()
    assert [(p["source"], p["status"]) for p in listed] == [("sleeptime", "proposed")]
    # Another scheduled proposal is too soon after it (min_seconds_between_proposals):
    # refused before the model is asked, and nothing recorded.
    asked = len(llm.requests)
    eventlog = await EventLog.connect(system.env["NATS_URL"], name="test-evolution-soon")
    try:
        command = ProposeChange(
            agent_id=agent.id, proposal_id=new_id("proposal"), source="sleeptime"
        )
        reply = await send_and_wait(
            eventlog,
            subjects.evolution_command_subject(agent.id),
            Envelope.wrap(command, aggregate_id=agent.id, producer="test"),
            timeout=30,
        )
    finally:
        await eventlog.close()
    assert reply.status == 429 and "min_seconds_between_proposals" in (reply.error or "")
    assert len(llm.requests) == asked
    history = (await system.http.get(f"{base}/history")).json()
    assert [h["type"] for h in history] == ["EvolutionConfigured", "ChangeProposed"]


def asked_about(requests: list[dict[str, Any]], text: str) -> int:
    """How many calls (live or shadow, not the judge's) answered the input `text`."""
    return sum(
        str(b["messages"][0].get("content")) != RUBRIC
        and str(b["messages"][-1].get("content")) == text
        for b in requests
    )


async def test_an_evaluation_killed_midway_resumes_without_asking_recorded_cases_again(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = scripted
    aid, base = await agent_with_runs(system, 9)
    held = threading.Event()
    holding: list[bool] = []

    def hold_case_three(body: dict[str, Any]) -> Reply:
        # The first shadow call of case 3 is held while the service is killed.
        reply = scripted(body)
        if str(body["messages"][-1].get("content")) == "question 3" and not holding:
            holding.append(True)
            reply.release = held
        return reply

    config = {"enabled": True, "cases_per_evaluation": 9, "max_votes_per_conversation": 9}
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    llm.default_reply = hold_case_three
    supervisor = system.supervisor
    restarts = supervisor.restart_count("evolution")
    patch = {"ops": [{"op": "append_text", "target": "system", "text": RULE}]}
    async with evolution_events(system, aid) as events:
        pid = (await system.http.post(f"{base}/proposals", json={"patch": patch})).json()["id"]
        # Cases go oldest first: "question 0", 1, 2 are recorded, 3 is in flight.
        await events.wait_for("CaseEvaluated", 3)
        await asyncio.to_thread(llm.wait_for_requests, lambda _: bool(holding), 30.0)
        asked = list(llm.requests)
        # The agent's folds as of the first case are kept beyond the process: its restart
        # reads the log on from there (o_evolution/checkpoints.py).
        kept = await checkpoint_of(system, aid)
        assert kept is not None and kept.folds
        for p in supervisor.pids("evolution"):
            os.kill(p, signal.SIGKILL)
        held.set()
        await asyncio.wait_for(supervisor.wait_for_restarts("evolution", restarts + 1), 30)
        # The command comes back after its ack wait (30 s), and the evaluation goes on.
        await events.wait_until(lambda e: e.type == "CandidateEvaluated", deadline=90)
        await projected(system, events.last_seq, EVOLUTION)
    proposal = (await system.http.get(f"{base}/proposals/{pid}")).json()
    assert proposal["status"] == "accepted"
    assert [c["n"] for c in proposal["cases"]] == list(range(9))
    cases = [e.data for e in events.seen if e.type == "CaseEvaluated"]
    assert sorted(c.n for c in cases) == list(range(9))  # each case recorded once
    # The recorded cases' calls were not asked again after the restart.
    # (Each input was asked once by its live run, then once per shadow arm.)
    for text in ("question 0", "question 1", "question 2"):
        assert asked_about(asked, text) == 3
        assert asked_about(llm.requests, text) == 3
    # The case in flight is asked again in full (its held call's answer was lost).
    assert asked_about(asked, "question 3") == 2
    assert asked_about(llm.requests, "question 3") == 4
    assert (await system.http.get(f"{base}/verify")).json()["ok"] is True


async def checkpoint_of(system: System, agent_id: str) -> Checkpoint | None:
    conn = await asyncpg.connect(system.env["DATABASE_URL"])
    try:
        row = await conn.fetchrow(
            "SELECT seq, folds FROM snapshot_checkpoints WHERE agent_id = $1", agent_id
        )
    finally:
        await conn.close()
    if row is None:
        return None
    checkpoint = checkpoint_codec.decode(row["folds"])
    assert checkpoint.seq == row["seq"]
    return checkpoint


async def test_a_proposal_retried_with_an_idempotency_key_is_one_proposal(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    base = PREFIX.format(agent["id"])
    config = {"enabled": True, "mode": "propose_only"}  # (nothing evaluated: no model asked)
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    body = {"patch": {"ops": [{"op": "append_text", "target": "system", "text": RULE}]}}
    key = {"Idempotency-Key": f"propose-{new_id('cmd')}"}
    first = await system.http.post(f"{base}/proposals", json=body, headers=key)
    again = await system.http.post(f"{base}/proposals", json=body, headers=key)
    other = await system.http.post(f"{base}/proposals", json=body)  # no key: a new one
    assert [r.status_code for r in (first, again, other)] == [201, 201, 201], again.text
    assert again.json()["id"] == first.json()["id"] != other.json()["id"]
    listed = (await system.http.get(f"{base}/proposals")).json()
    assert sorted(p["id"] for p in listed) == sorted([first.json()["id"], other.json()["id"]])
    # A refused proposal's retry is refused as the first try was, and recorded once.
    human = {"patch": {"ops": [{"op": "append_text", "target": "block:human", "text": "x"}]}}
    key = {"Idempotency-Key": f"propose-{new_id('cmd')}"}
    refusals = [
        await system.http.post(f"{base}/proposals", json=human, headers=key) for _ in range(2)
    ]
    assert [r.status_code for r in refusals] == [422, 422]
    assert refusals[0].json() == refusals[1].json()
    eventlog = await EventLog.connect(system.env["NATS_URL"], name="test-propose-retry")
    try:
        recorded = await eventlog.read_subject(subjects.evolution_subject(agent["id"]))
    finally:
        await eventlog.close()
    kinds = [r.envelope.type for r in recorded]
    assert (kinds.count("ChangeProposed"), kinds.count("ProposalRefused")) == (2, 1)
    bad = await system.http.post(
        f"{base}/proposals", json=body, headers={"Idempotency-Key": "x" * 300}
    )
    assert bad.status_code == 422 and "Idempotency-Key" in bad.json()["detail"]


async def test_a_configuration_delivered_again_late_does_not_undo_a_later_one(
    system: System,
) -> None:
    """A command delivered again after its effect (its ack lost, a client's retry) past
    the stream's two-minute duplicate window was recorded again: here an old configuration,
    appended after the newer one, turned evolution back on. Each decision is now found in the
    history by its event id before it is appended."""
    aid = str((await new_agent(system))["id"])
    base = PREFIX.format(aid)
    config = EvolutionConfig(enabled=True, mode="propose_only")
    first = Envelope.wrap(
        ConfigureEvolution(agent_id=aid, config=config), aggregate_id=aid, producer="test"
    )
    subject = subjects.evolution_command_subject(aid)
    eventlog = await EventLog.connect(system.env["NATS_URL"], name="test-configure-late")
    try:
        assert (await send_and_wait(eventlog, subject, first, timeout=30)).ok
        assert (await system.http.put(f"{base}/config", json={"enabled": False})).is_success
        event_id = derived_id("evt", first.id, "configured")
        async with short_dedup_window(system):
            await forgotten(system, subjects.evolution_subject(aid), event_id)
            again = await send_and_wait(eventlog, subject, first, timeout=30)
    finally:
        await eventlog.close()
    assert again.ok, again.error
    assert (await system.http.get(f"{base}/config")).json()["enabled"] is False
    history = (await system.http.get(f"{base}/history")).json()
    assert [h["type"] for h in history] == ["EvolutionConfigured"] * 2
    assert (await system.http.get(f"{base}/verify")).json()["ok"] is True


TWO_CASES = {"enabled": True, "cases_per_evaluation": 2, "max_votes_per_conversation": 2}


async def evolving_agents(system: System, others: int) -> tuple[str, list[str]]:
    """An agent with two finished runs and `others` without any, each evolving in mode
    shadow over two cases (the others' evaluations have no case: decided at once)."""
    aid, _ = await agent_with_runs(system, 2)
    rest = [str((await new_agent(system))["id"]) for _ in range(others)]
    for agent_id in [aid, *rest]:
        made = await system.http.put(PREFIX.format(agent_id) + "/config", json=TWO_CASES)
        assert made.status_code == 200, made.text
    return aid, rest


async def test_evaluations_waiting_their_turn_hold_up_no_other_evolution_command(
    system: System, llm: FakeOpenAI
) -> None:
    """Shadow work runs one evaluation at a time; the others wait in the stream, not in the
    evolution service's four command slots. With one evaluation's model call held and five
    more evaluations waiting behind it, proposals and a configuration are still answered.
    (Found by the chaos suite: proposals took 9 s at the median, 17 s at worst, each
    answered only once the evaluations ahead of it had ended.)"""
    aid, others = await evolving_agents(system, 5)
    base = PREFIX.format(aid)
    body = {"patch": {"ops": [{"op": "append_text", "target": "system", "text": RULE}]}}
    held = threading.Event()
    llm.default_reply = lambda _: Reply(content="held", release=held)
    asked = len(llm.requests)
    proposals = []
    try:
        first = await system.http.post(f"{base}/proposals", json=body)
        assert first.status_code == 201, first.text
        proposals.append((aid, first.json()["id"]))
        await until(llm, lambda reqs: len(reqs) > asked)  # its first case's arm, held
        for agent_id in others:
            post = system.http.post(PREFIX.format(agent_id) + "/proposals", json=body)
            made = await asyncio.wait_for(post, 20)
            assert made.status_code == 201, made.text
            proposals.append((agent_id, made.json()["id"]))
        put = system.http.put(PREFIX.format(others[0]) + "/config", json=TWO_CASES)
        assert (await asyncio.wait_for(put, 20)).status_code == 200
        # All of it while the first evaluation still waits for its model.
        assert len(llm.requests) == asked + 1
    finally:
        held.set()
    llm.default_reply = echo_reply
    # Each is evaluated in its turn (the others have no runs to replay: no cases).
    for agent_id, proposal_id in proposals:
        result = await decided(system, agent_id, proposal_id)
        assert result["status"] in ("accepted", "rejected"), result


BETTER = "(better)"


def marked(body: dict[str, Any]) -> Reply:
    """The agent's answer carries a "+" for each BETTER its system prompt (blocks included)
    holds; the judge prefers the answer with more of them."""
    first = str(body["messages"][0].get("content"))
    if first == RUBRIC:
        prompt = str(body["messages"][-1]["content"])
        a, b = prompt.split("Answer A:\n", 1)[1].split("\n\nAnswer B:\n", 1)
        a_marks, b_marks = a.count("+"), b.split("\n\nWhich answer", 1)[0].count("+")
        return Reply(content="A" if a_marks > b_marks else "B" if b_marks > a_marks else "tie")
    reply = echo_reply(body)
    return Reply(content=f"{reply.content} {'+' * first.count(BETTER)}")


async def accepted(system: System, base: str, aid: str, ops: list[dict[str, Any]]) -> str:
    """A proposal of `ops`, evaluated (accepted) and approved: its id."""
    made = await system.http.post(f"{base}/proposals", json={"patch": {"ops": ops}})
    assert made.status_code == 201, made.text
    result = await decided(system, aid, made.json()["id"])
    assert result["status"] == "accepted", result["report"]
    approved = await system.http.post(f"{base}/proposals/{result['id']}/approve", json={})
    assert approved.json()["status"] == "approved", approved.text
    return str(result["id"])


async def test_a_promotion_keeps_what_changed_in_the_agent_since_the_proposal(
    system: System, llm: FakeOpenAI
) -> None:
    """A candidate is its parent patched, as of the proposal. Promoted later, it used to be
    served as it was: a persona edit made in between, and another proposal promoted in
    between, were silently undone. The patch is now made on the agent as it has become; a
    patch that no longer fits is refused, and the agent left as it is."""
    llm.default_reply = marked
    aid, base = await agent_with_runs(system, 9)
    config = {"enabled": True, "cases_per_evaluation": 9, "max_votes_per_conversation": 9}
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    persona_url = f"/v1/agents/{aid}/core-memory/blocks/persona"
    system_before = (await system.http.get(f"/v1/agents/{aid}")).json()["system"]
    greets = [{"op": "append_text", "target": "block:persona", "text": f"Greets by name {BETTER}."}]
    brief = [{"op": "append_text", "target": "system", "text": f"Be brief {BETTER}."}]
    first = await accepted(system, base, aid, greets)
    second = await accepted(system, base, aid, brief)  # (from the same parent as the first)

    # A person edits the persona after both were proposed.
    persona = (await system.http.get(persona_url)).json()["value"]
    edited = await system.http.patch(persona_url, json={"value": f"{persona}\nLikes sailing."})
    assert edited.status_code == 200, edited.text

    for proposal_id in (first, second):
        promoted = await system.http.post(f"{base}/proposals/{proposal_id}/promote")
        assert promoted.status_code == 200, promoted.text
    agent = (await system.http.get(f"/v1/agents/{aid}")).json()
    persona_now = (await system.http.get(persona_url)).json()["value"]
    assert persona_now == f"{persona}\nLikes sailing.\nGreets by name {BETTER}."
    assert agent["system"].endswith(f"Be brief {BETTER}.")
    reply = await send(system, aid, "after both")
    said = [m for m in reply["messages"] if m["message_type"] == "assistant_message"]
    assert said[-1]["content"].endswith("++")

    # What is served is a version of its own, the second's change on the first's.
    versions = (await system.http.get(f"{base}/versions")).json()
    proposals = {p["id"]: p for p in (await system.http.get(f"{base}/proposals")).json()}
    history = (await system.http.get(f"{base}/history")).json()
    promotions = [h["decision"] for h in history if h["type"] == "VersionPromoted"]
    assert [h["proposal_id"] for h in promotions] == [first, second]
    assert promotions[1]["previous_version"] == promotions[0]["version_id"]
    assert versions["serving"] == promotions[1]["version_id"]
    assert versions["serving"] != proposals[second]["candidate_version"]
    served = next(v for v in versions["versions"] if v["version_id"] == versions["serving"])
    assert served["spec"]["blocks"]["persona"] == persona_now
    assert served["spec"]["system"] == agent["system"]

    # A patch whose anchor is gone by the time of its promotion is refused, the agent as it was.
    rowing = [
        {
            "op": "replace_text",
            "target": "block:persona",
            "old": "Likes sailing.",
            "new": f"Likes sailing {BETTER}.",
        }
    ]
    third = await accepted(system, base, aid, rowing)
    now = persona_now.replace("Likes sailing.", "Likes rowing.")
    assert (await system.http.patch(persona_url, json={"value": now})).status_code == 200
    refused = await system.http.post(f"{base}/proposals/{third}/promote")
    assert refused.status_code == 409, refused.text
    assert "persona changed since" in refused.json()["detail"], refused.json()
    assert (await system.http.get(persona_url)).json()["value"] == now
    assert (await system.http.get(f"{base}/versions")).json()["serving"] == versions["serving"]

    # Rolled back to before both: evolution's two changes are taken back, the person's
    # edits (one made before the promotions, one after) stay.
    back = await system.http.post(
        f"{base}/rollback", json={"version_id": promotions[0]["previous_version"]}
    )
    assert back.status_code == 200, back.text
    assert (await system.http.get(persona_url)).json()["value"] == f"{persona}\nLikes rowing."
    system_now = (await system.http.get(f"/v1/agents/{aid}")).json()["system"]
    assert system_now == system_before
    assert (await system.http.get(f"{base}/verify")).json()["ok"] is True


async def test_a_rollback_undone_makes_the_promotion_again_and_keeps_every_memory_edit(
    system: System, llm: FakeOpenAI
) -> None:
    """Rolled back across a rollback (here: the rollback itself undone), a block used to go
    from the one version's text to the other's: what was written in it between the
    promotion and the first rollback was taken back with it. Each decision's own edits are
    taken back now."""
    llm.default_reply = marked
    aid, base = await agent_with_runs(system, 9)
    config = {"enabled": True, "cases_per_evaluation": 9, "max_votes_per_conversation": 9}
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    persona_url = f"/v1/agents/{aid}/core-memory/blocks/persona"
    persona = (await system.http.get(persona_url)).json()["value"]
    greets = [{"op": "append_text", "target": "block:persona", "text": f"Greets {BETTER}."}]
    proposal_id = await accepted(system, base, aid, greets)
    promoted = await system.http.post(f"{base}/proposals/{proposal_id}/promote")
    assert promoted.status_code == 200, promoted.text
    history = (await system.http.get(f"{base}/history")).json()
    promotion = next(h["decision"] for h in history if h["type"] == "VersionPromoted")

    async def write(line: str) -> str:
        now = (await system.http.get(persona_url)).json()["value"]
        edited = await system.http.patch(persona_url, json={"value": f"{now}\n{line}"})
        assert edited.status_code == 200, edited.text
        return str(edited.json()["value"])

    async def roll_back_to(version_id: str) -> str:
        back = await system.http.post(f"{base}/rollback", json={"version_id": version_id})
        assert back.status_code == 200, back.text
        return str((await system.http.get(persona_url)).json()["value"])

    await write("Likes sailing.")
    rolled = await roll_back_to(promotion["previous_version"])
    assert rolled == f"{persona}\nLikes sailing."
    versions = (await system.http.get(f"{base}/versions")).json()
    made = next(v for v in versions["versions"] if v["version_id"] == versions["serving"])
    assert made["parent_id"] == promotion["version_id"]  # (the version it replaced)
    await write("Likes rowing.")
    # Asked twice at once (a double click): made once. The second, if it waited for the
    # first, is refused (it was asked of the version served before); if it came after,
    # it changes nothing. (Both used to append the patch again.)
    body = {"version_id": promotion["version_id"]}
    twice = await asyncio.gather(*(system.http.post(f"{base}/rollback", json=body) for _ in "ab"))
    codes = sorted(a.status_code for a in twice)
    assert codes in ([200, 200], [200, 409]), [a.text for a in twice]
    for refused in (a.json()["detail"] for a in twice if a.status_code == 409):
        assert "changed while this rollback waited" in refused
    again = str((await system.http.get(persona_url)).json()["value"])
    assert again == f"{persona}\nLikes sailing.\nLikes rowing.\nGreets {BETTER}."
    # And back to before the promotion, across both rollbacks; sent twice at once under one
    # Idempotency-Key (a client's retry): one rollback, both answered.
    await write("Hums.")
    body = {"version_id": promotion["previous_version"]}
    keyed = {"Idempotency-Key": f"back-{aid}"}
    both = await asyncio.gather(
        *(system.http.post(f"{base}/rollback", json=body, headers=keyed) for _ in "ab")
    )
    assert [a.status_code for a in both] == [200, 200], [a.text for a in both]
    before = (await system.http.get(persona_url)).json()["value"]
    assert before == f"{persona}\nLikes sailing.\nLikes rowing.\nHums."
    decisions = [h["type"] for h in (await system.http.get(f"{base}/history")).json()]
    after = decisions[decisions.index("VersionPromoted") + 1 :]
    assert after == ["VersionRolledBack"] * (2 + codes.count(200)), decisions
    # Forward again (another key), then the keyed request above sent once more (a client's
    # late retry): answered from its record. It used to be made again, taking back the
    # rollback after it.
    forward = {"version_id": promotion["version_id"]}
    onward = {"Idempotency-Key": f"forward-{aid}"}
    ahead = await system.http.post(f"{base}/rollback", json=forward, headers=onward)
    assert ahead.status_code == 200, ahead.text
    served = (await system.http.get(persona_url)).json()["value"]
    assert served == f"{before}\nGreets {BETTER}."
    # (Late: past the stream's duplicate window, which hid the defect for two minutes.)
    command_id = derived_id("cmd", aid, f"key:back-{aid}", "rollback")
    async with short_dedup_window(system):
        await forgotten(
            system, subjects.evolution_subject(aid), derived_id("evt", command_id, "served")
        )
        late = await system.http.post(f"{base}/rollback", json=body, headers=keyed)
    assert late.status_code == 200, late.text
    assert (await system.http.get(persona_url)).json()["value"] == served
    history = [h["type"] for h in (await system.http.get(f"{base}/history")).json()]
    assert history == [*decisions, "VersionRolledBack"]
    assert (await system.http.get(f"{base}/verify")).json()["ok"] is True


async def test_a_rollback_refused_on_one_block_leaves_the_others_as_they_were(
    system: System, llm: FakeOpenAI
) -> None:
    """A rollback takes back its edits block by block; refused on its second block (the
    agent rewrote the text it would take back), it used to leave the first rolled back
    with no rollback recorded. Now the first is made again: a refused rollback changes
    nothing."""
    llm.default_reply = marked
    blocks = [
        {"label": "human", "value": "Name: Sam"},
        {"label": "persona", "value": "Helpful."},
        {"label": "guidelines", "value": "Be kind."},
    ]
    aid = str((await new_agent(system, memory_blocks=blocks))["id"])
    for i in range(9):
        await send(system, aid, f"question {i}")
    base = PREFIX.format(aid)
    config = {
        "enabled": True,
        "cases_per_evaluation": 9,
        "max_votes_per_conversation": 9,
        "evolvable_blocks": ["persona", "guidelines"],
    }
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    ops = [
        {"op": "append_text", "target": "block:persona", "text": f"Greets {BETTER}."},
        {"op": "append_text", "target": "block:guidelines", "text": "Cites sources."},
    ]
    proposal_id = await accepted(system, base, aid, ops)
    promoted = await system.http.post(f"{base}/proposals/{proposal_id}/promote")
    assert promoted.status_code == 200, promoted.text
    block_url = f"/v1/agents/{aid}/core-memory/blocks/{{}}"
    guidelines = (await system.http.get(block_url.format("guidelines"))).json()["value"]
    assert guidelines == "Be kind.\nCites sources."
    rewritten = {"value": "Be kind.\nCites nothing."}
    assert (await system.http.patch(block_url.format("guidelines"), json=rewritten)).is_success
    persona = (await system.http.get(block_url.format("persona"))).json()["value"]
    assert persona.endswith(f"\nGreets {BETTER}.")

    history = (await system.http.get(f"{base}/history")).json()
    promotion = next(h["decision"] for h in history if h["type"] == "VersionPromoted")
    body = {"version_id": promotion["previous_version"]}
    keyed = {"Idempotency-Key": f"undo-{aid}"}
    refused = await system.http.post(f"{base}/rollback", json=body, headers=keyed)
    assert refused.status_code == 409, refused.text
    assert "guidelines" in refused.json()["detail"]
    assert (await system.http.get(block_url.format("persona"))).json()["value"] == persona
    now = (await system.http.get(block_url.format("guidelines"))).json()["value"]
    assert now == "Be kind.\nCites nothing."
    decisions = [h["type"] for h in (await system.http.get(f"{base}/history")).json()]
    assert "VersionRolledBack" not in decisions
    assert (await system.http.get(f"{base}/versions")).json()["serving"] == promotion["version_id"]

    # The block written back, the same request again (same key) is the same rollback: refused
    # as before. (It used to leave the persona as it was, its edit there counted as made by
    # the first try though that one took it back, and record a rollback of both blocks.)
    restored = {"value": "Be kind.\nCites sources."}
    assert (await system.http.patch(block_url.format("guidelines"), json=restored)).is_success
    again = await system.http.post(f"{base}/rollback", json=body, headers=keyed)
    assert again.status_code == 409, again.text
    assert "refused before" in again.json()["detail"]
    assert (await system.http.get(block_url.format("persona"))).json()["value"] == persona
    # A new key asks again: both blocks rolled back, one decision.
    fresh = {"Idempotency-Key": f"undo-again-{aid}"}
    done = await system.http.post(f"{base}/rollback", json=body, headers=fresh)
    assert done.status_code == 200, done.text
    assert (await system.http.get(block_url.format("persona"))).json()["value"] == "Helpful."
    assert (await system.http.get(block_url.format("guidelines"))).json()["value"] == "Be kind."
    decisions = [h["type"] for h in (await system.http.get(f"{base}/history")).json()]
    assert decisions.count("VersionRolledBack") == 1


async def test_a_canarys_candidate_shows_what_was_written_in_its_blocks_during_the_canary(
    system: System, llm: FakeOpenAI
) -> None:
    """The candidate arm used to show the persona as it was when the canary started: an
    edit made during the canary never reached the candidate's prompts."""
    llm.default_reply = marked
    aid, base = await agent_with_runs(system, 9)
    # (At full weight from its first step: every run takes the candidate.)
    config = canary_config(canary_steps=[100], analysis_every=50, approval_before_canary=False)
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    greets = {"op": "append_text", "target": "block:persona", "text": f"Greets {BETTER}."}
    made = await system.http.post(f"{base}/proposals", json={"patch": {"ops": [greets]}})
    pid = made.json()["id"]
    assert (await decided(system, aid, pid, "RolloutStarted"))["status"] == "canary"

    persona_url = f"/v1/agents/{aid}/core-memory/blocks/persona"
    persona = (await system.http.get(persona_url)).json()["value"]
    edited = await system.http.patch(persona_url, json={"value": f"{persona}\nLikes sailing."})
    assert edited.status_code == 200, edited.text
    asked = len(llm.requests)
    reply = await send(system, aid, "during the canary")
    said = [m for m in reply["messages"] if m["message_type"] == "assistant_message"]
    assert said[-1]["content"].endswith("+")  # (the candidate's arm)
    prompt = str(llm.requests[asked]["messages"][0]["content"])
    assert f"{persona}\nLikes sailing.\nGreets {BETTER}." in prompt
    # The agent's own block holds the edit, not the candidate's change.
    assert (await system.http.get(persona_url)).json()["value"] == f"{persona}\nLikes sailing."


async def test_a_proposal_accepted_during_anothers_canary_gets_its_own_after_it(
    system: System, llm: FakeOpenAI
) -> None:
    """Mode auto: a proposal accepted while another's canary runs is refused a canary of its
    own (one at a time) and used to wait for a person forever. Now it starts when the slot
    is free, made on the agent the first promotion left."""
    llm.default_reply = marked
    aid, base = await agent_with_runs(system, 9)
    config = canary_config(mode="auto", canary_steps=[100], analysis_every=2)
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    ids = []
    for text in ("Greets", "Hums"):
        op = {"op": "append_text", "target": "block:persona", "text": f"{text} {BETTER}."}
        made = await system.http.post(f"{base}/proposals", json={"patch": {"ops": [op]}})
        assert made.status_code == 201, made.text
        ids.append(made.json()["id"])
        if len(ids) == 1:
            assert (await decided(system, aid, ids[0], "RolloutStarted"))["status"] == "canary"
    first, second = ids
    assert (await decided(system, aid, second))["status"] == "accepted"
    rollouts = (await system.http.get(f"{base}/rollouts")).json()
    assert [r["proposal_id"] for r in rollouts] == [first]

    # Each canary is at full weight from its start: two runs (`analysis_every`) take its
    # candidate arm, and the analysis after them completes it. (Sent only once it started:
    # a fixed number of messages sent at once raced the service on a loaded machine.)
    for pid in (first, second):
        if pid == second:
            assert (await decided(system, aid, second, "RolloutStarted"))["status"] == "canary"
        for i in range(2):
            await send(system, aid, f"live {pid} {i}")
        assert (await decided(system, aid, pid, "VersionPromoted"))["status"] == "promoted"
    listed = (await system.http.get(f"{base}/proposals")).json()
    assert {p["id"]: p["status"] for p in listed} == {first: "promoted", second: "promoted"}
    # (The memory service made the block edits before the promotion was recorded.)
    await projected_past(system, await log_end(system), MEMORY)
    persona = (await system.http.get(f"/v1/agents/{aid}/core-memory/blocks/persona")).json()
    assert persona["value"].endswith(f"\nGreets {BETTER}.\nHums {BETTER}.")
    rollouts = (await system.http.get(f"{base}/rollouts")).json()
    assert sorted(r["proposal_id"] for r in rollouts) == sorted(ids)
    assert (await system.http.get(f"{base}/verify")).json()["ok"] is True


async def test_an_evaluation_waiting_its_turn_is_not_overtaken_by_a_later_one(
    system: System, llm: FakeOpenAI
) -> None:
    """An evaluation deferred to the stream while the shadow was busy used to lose its turn to
    one proposed later that arrived just as the slot freed; the oldest waiting one goes now."""
    aid, others = await evolving_agents(system, 3)
    body = {"patch": {"ops": [{"op": "append_text", "target": "system", "text": RULE}]}}

    async def propose(agent_id: str) -> str:
        made = await system.http.post(PREFIX.format(agent_id) + "/proposals", json=body)
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    held = threading.Event()
    llm.default_reply = lambda _: Reply(content="held", release=held)
    asked = len(llm.requests)
    try:
        first = await propose(aid)
        await until(llm, lambda reqs: len(reqs) > asked)  # its first case, held
        next_in_line = await propose(others[0])  # (waits for the slot in a handler)
        waiting = await propose(others[1])  # (back to the stream: the line is taken)
    finally:
        llm.default_reply = echo_reply
        held.set()
    # The next in line has no runs (no cases): once it is decided the slot is free, and the
    # waiting one is back from the stream within 2 s. A proposal made now must not take its
    # turn (without the waiting line it did, nearly always: it found the slot free).
    await decided(system, others[0], next_in_line)
    later = await propose(others[2])
    order = [(aid, first), (others[0], next_in_line), (others[1], waiting), (others[2], later)]
    started = {}
    for agent_id, proposal_id in order:
        await decided(system, agent_id, proposal_id)
        history = (await system.http.get(PREFIX.format(agent_id) + "/history")).json()
        started[proposal_id] = next(
            h["created_at"] for h in history if h["type"] == "EvaluationStarted"
        )
    assert started[first] < started[next_in_line] < started[waiting] < started[later], started


async def test_a_promotion_asked_twice_at_once_is_made_once(
    system: System, llm: FakeOpenAI
) -> None:
    """A promotion appends its edits to the agent's blocks: two promote commands for one
    proposal racing (a double click, a client's retry) must not append them twice, nor
    record two promotions."""
    llm.default_reply = marked
    aid, base = await agent_with_runs(system, 9)
    config = {"enabled": True, "cases_per_evaluation": 9, "max_votes_per_conversation": 9}
    assert (await system.http.put(f"{base}/config", json=config)).status_code == 200
    greets = [{"op": "append_text", "target": "block:persona", "text": f"Greets {BETTER}."}]
    pid = await accepted(system, base, aid, greets)
    url = f"{base}/proposals/{pid}/promote"
    answers = await asyncio.gather(system.http.post(url), system.http.post(url))
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    persona = (await system.http.get(f"/v1/agents/{aid}/core-memory/blocks/persona")).json()
    assert persona["value"].count(BETTER) == 1, persona["value"]
    history = (await system.http.get(f"{base}/history")).json()
    assert [h["type"] for h in history].count("VersionPromoted") == 1
    assert (await system.http.get(f"{base}/verify")).json()["ok"] is True
