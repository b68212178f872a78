"""Evolution in the agent's own hands (issue 20): its evolution tools, called in its own
loop (the scripted LLM calls them when a message says `CALL <tool> <json>`), through the
API against the five processes with real NATS and Postgres."""

from __future__ import annotations

import json
from typing import Any

import pytest

from o_contracts.base_tools import EVOLUTION_TOOLS
from o_contracts.projection_names import EVOLUTION
from tests.e2e.conftest import System
from tests.e2e.support import evolution_events, new_agent, projected, send
from tests.e2e.test_evolution import RULE, decided
from tests.e2e.test_evolution import scripted as evolution_scripted
from tests.e2e.test_evolution_archive import archived
from tests.e2e.test_sleeptime import REMINDER, sleeptime_agent
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e
PREFIX = "/v1/agents/{}/evolution"
WRONG_EDIT = {"label": "persona", "old_string": "not there", "new_string": "x"}


def offered(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}


def calling(body: dict[str, Any]) -> Reply:
    """`CALL <tool> <json args>` makes the model call that tool; a tool's answer is said
    back as `tool said: ...`; a companion's review calls the performance report when it
    has it; everything else as in test_evolution (greets when the rule is in the prompt)."""
    last = body["messages"][-1]
    text = str(last.get("content") or "")
    if last["role"] == "tool":
        return Reply(content=f"tool said: {text}")
    if text.startswith("CALL "):
        _, name, args = text.split(" ", 2)
        return Reply(tool_calls=[(name, json.loads(args))])
    if text.startswith(REMINDER) and "evolution_performance_report" in offered(body):
        return Reply(tool_calls=[("evolution_performance_report", {})])
    return evolution_scripted(body)


def said(reply: dict[str, Any]) -> str:
    return str(
        [m for m in reply["messages"] if m["message_type"] == "assistant_message"][-1]["content"]
    )


def tool_return(reply: dict[str, Any]) -> dict[str, Any]:
    (returned,) = [m for m in reply["messages"] if m["message_type"] == "tool_return_message"]
    return returned


async def call(system: System, agent_id: str, tool: str, **args: Any) -> dict[str, Any]:
    return tool_return(await send(system, agent_id, f"CALL {tool} {json.dumps(args)}"))


async def evolving_agent(system: System, runs: int = 0, **config: Any) -> str:
    """An agent that answered `runs` questions, with its evolution and its tools on."""
    aid = str((await new_agent(system, tools=["archival_memory_search"]))["id"])
    for i in range(runs):
        await send(system, aid, f"question {i}")
    body = {"enabled": True, "tools_for_agent": True} | config
    assert (await system.http.put(PREFIX.format(aid) + "/config", json=body)).status_code == 200
    return aid


async def test_the_companion_reads_the_primarys_performance_report(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = calling
    agent = await sleeptime_agent(system, "reporting", frequency=5)
    base = PREFIX.format(agent.id)
    (companion_id,) = agent.multi_agent_group.agent_ids
    # (Evolution off during the first turn's companion run: it has no evolution tools.)
    for i in range(4):
        await send(system, agent.id, f"question {i}")
    await send(system, agent.id, f"CALL memory_replace {json.dumps(WRONG_EDIT)}")
    assert (await system.http.put(f"{base}/config", json={"enabled": True})).status_code == 200
    async with evolution_events(system, agent.id) as events:
        # Another failing edit: the sixth run, whose turn runs the companion, which now
        # has the tools and asks for the report.
        await send(system, agent.id, f"CALL memory_replace {json.dumps(WRONG_EDIT)}")
        called = await events.wait_until(
            lambda e: e.type == "EvolutionToolCalled" and e.data.run_id != ""
        )
        await projected(system, events.last_seq, EVOLUTION)
    report = called.data
    assert report.caller_agent_id == companion_id and report.agent_id == agent.id
    assert report.tool_name == "evolution_performance_report" and report.ok
    first = report.result.splitlines()[0]
    assert first.startswith("Recent runs (newest 6): 6 runs, 0 failed (0%), 2 tool errors in")
    assert " 2 runs (33%)," in first
    assert "- tool:memory_replace: 2 runs, 0 failed (0%), 2 tool errors" in report.result
    # The companion's own tool list had them; the primary's (tools_for_agent off) did not.
    companion_asks = [b for b in llm.requests if REMINDER in str(b["messages"][-1].get("content"))]
    assert set(EVOLUTION_TOOLS) <= offered(companion_asks[-1])
    assert not set(EVOLUTION_TOOLS) & offered(companion_asks[0])  # (evolution was off)
    primary_asks = [
        b for b in llm.requests if "question 0" in str(b["messages"][-1].get("content"))
    ]
    assert not set(EVOLUTION_TOOLS) & offered(primary_asks[0])
    history = (await system.http.get(f"{base}/history")).json()
    assert "EvolutionToolCalled" in [h["type"] for h in history]


async def test_a_proposal_through_the_tool_follows_the_same_pipeline(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = calling
    # (Ten cases: nine wins accept even if the proposing run is one of them.)
    aid = await evolving_agent(
        system,
        10,
        cases_per_evaluation=10,
        max_votes_per_conversation=10,
        agent_proposals_per_day=1,
    )
    base = PREFIX.format(aid)
    ops = [{"op": "append_text", "target": "system", "text": RULE}]
    returned = await call(system, aid, "evolution_propose_change", ops=ops, rationale="greet")
    assert returned["status"] == "success", returned
    (proposal,) = (await system.http.get(f"{base}/proposals")).json()
    assert proposal["source"] == "agent" and proposal["id"] in returned["tool_return"]
    # Evaluated in the shadow like any other, and not served by itself.
    evaluated = await decided(system, aid, proposal["id"])
    assert evaluated["status"] == "accepted", evaluated["report"]["reason"]
    # (The run that proposed may finish in time to be a case: in the shadow its tool
    # call is never run, and the case is inconclusive.)
    for case in evaluated["cases"]:
        if case["outcome"] != "win":
            assert case["outcome"] == "inconclusive", case
            assert case["veto"].endswith("'evolution_propose_change' not executed in shadow")
    assert not (await system.http.get(f"/v1/agents/{aid}")).json()["system"].endswith(RULE)
    # The agent's status shows it; a second proposal today is over the cap.
    status = await call(system, aid, "evolution_status")
    assert (
        f"- CandidateEvaluated {proposal['id']}: the candidate is better" in status["tool_return"]
    )
    assert "0 of 1 proposals of your own left today" in status["tool_return"]
    again = await call(system, aid, "evolution_propose_change", ops=ops, rationale="again")
    assert again["status"] == "error" and "agent_proposals_per_day" in again["tool_return"]
    assert len((await system.http.get(f"{base}/proposals")).json()) == 1


async def test_protected_and_malformed_patches_are_tool_errors_before_any_spending(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = calling
    aid = await evolving_agent(system)
    base = PREFIX.format(aid)
    for ops, expected in (
        ([{"op": "append_text", "target": "block:human", "text": "x"}], "protected"),
        ([{"op": "set_model_setting", "key": "judge_model", "value": "x"}], "judge_model"),
        ([{"op": "add_tool", "name": "evolution_rollback"}], "outside what a patch may change"),
        ([{"op": "rewrite_everything"}], "malformed patch"),
    ):
        asked = len(llm.requests)
        returned = await call(system, aid, "evolution_propose_change", ops=ops, rationale="r")
        assert returned["status"] == "error" and expected in returned["tool_return"], returned
        # The agent's own two model calls (the tool call, then its answer), nothing else.
        assert len(llm.requests) - asked == 2
    statuses = [p["status"] for p in (await system.http.get(f"{base}/proposals")).json()]
    assert "accepted" not in statuses and "proposed" not in statuses


async def test_the_agent_rolls_back_to_a_served_version_and_history_says_it_asked(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = calling
    aid = await evolving_agent(system, 9, cases_per_evaluation=9, max_votes_per_conversation=9)
    base = PREFIX.format(aid)
    patch = {"ops": [{"op": "append_text", "target": "system", "text": RULE}]}
    made = (await system.http.post(f"{base}/proposals", json={"patch": patch})).json()
    assert (await decided(system, aid, made["id"]))["status"] == "accepted"
    await system.http.post(f"{base}/proposals/{made['id']}/approve", json={})
    await system.http.post(f"{base}/proposals/{made['id']}/promote")
    assert said(await send(system, aid, "hi")).startswith("Hello Sam")

    unknown = await call(system, aid, "evolution_rollback", version_id="version-x", reason="r")
    assert unknown["status"] == "error" and "unknown version" in unknown["tool_return"]
    other = (
        await system.http.post(
            f"{base}/proposals",
            json={"patch": {"ops": [{"op": "append_text", "target": "system", "text": "Be x."}]}},
        )
    ).json()
    never = await call(
        system, aid, "evolution_rollback", version_id=other["candidate_version"], reason="r"
    )
    assert never["status"] == "error" and "never served" in never["tool_return"]

    back = await call(
        system, aid, "evolution_rollback", version_id=made["parent_version"], reason="too chummy"
    )
    assert back["status"] == "success", back
    assert said(await send(system, aid, "hello again")) == "echo: hello again"
    history = (await system.http.get(f"{base}/history")).json()
    (rolled,) = [h for h in history if h["type"] == "VersionRolledBack"]
    assert rolled["decision"]["requested_by"] == "agent"
    assert rolled["decision"]["reason"] == "too chummy"
    calls = [h["decision"] for h in history if h["type"] == "EvolutionToolCalled"]
    assert [(c["tool_name"], c["ok"]) for c in calls] == [
        ("evolution_rollback", False),
        ("evolution_rollback", False),
        ("evolution_rollback", True),
    ]


async def test_the_agent_finds_its_rejected_proposal_in_archival_memory(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = calling
    aid = await evolving_agent(system)
    ops = [{"op": "append_text", "target": "system", "text": "Answer in riddles."}]
    returned = await call(system, aid, "evolution_propose_change", ops=ops, rationale="fun")
    assert returned["status"] == "success", returned
    (proposal,) = (await system.http.get(PREFIX.format(aid) + "/proposals")).json()
    assert (await decided(system, aid, proposal["id"]))["status"] == "rejected"
    # Configured, proposed, rejected: each an archival passage tagged evolution.
    await archived(system, aid, 3)
    searched = await call(system, aid, "archival_memory_search", query="rejected riddles")
    assert searched["status"] == "success", searched["tool_return"]
    assert f"proposal {proposal['id']} (source: agent)" in searched["tool_return"]
    assert "was rejected by the gate" in searched["tool_return"]


async def test_with_evolution_off_the_tools_are_absent_and_a_stale_call_is_a_tool_error(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = calling
    aid = str((await new_agent(system))["id"])
    await send(system, aid, "hello")
    assert not set(EVOLUTION_TOOLS) & offered(llm.requests[-1])
    returned = await call(system, aid, "evolution_status")
    assert returned["status"] == "error"
    assert "evolution is off for this agent" in returned["tool_return"]


async def test_a_shadow_case_over_its_wall_time_limit_is_inconclusive(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = evolution_scripted
    # A case takes a fraction of a second; the limit leaves room for a loaded machine (a
    # limit of 0.5 s once cut a plain case short in a full run beside other work).
    aid = await evolving_agent(
        system, 3, cases_per_evaluation=3, max_votes_per_conversation=3, shadow_case_seconds=3
    )

    def slow_on_one(body: dict[str, Any]) -> Reply:
        reply = evolution_scripted(body)
        if str(body["messages"][-1].get("content")) == "question 1":
            reply.delay = 6.0  # (the shadow replay of the second case)
        return reply

    llm.default_reply = slow_on_one
    patch = {"ops": [{"op": "append_text", "target": "system", "text": RULE}]}
    made = await system.http.post(PREFIX.format(aid) + "/proposals", json={"patch": patch})
    proposal = await decided(system, aid, made.json()["id"])
    outcomes = [(c["n"], c["outcome"]) for c in proposal["cases"]]
    assert outcomes == [(0, "win"), (1, "inconclusive"), (2, "win")]
    assert proposal["cases"][1]["veto"] == "the case exceeded its wall-time limit of 3 s"
    assert proposal["report"]["inconclusive"] == 1 and proposal["status"] == "rejected"
