"""Step feedback (Letta's `PATCH /v1/steps/{step_id}/feedback`) against the five processes:
recorded on the log, shown on the step and matched by the list's filters; refused for an
unknown step or a bad value; read by evolution (the proposer's digest counts a run's
negative ratings, the shadow's cases carry their run's rating, a canary arm's runs rated
negative are counted)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from o_evolution.judge import RUBRIC
from o_evolution.proposer import INSTRUCTIONS
from tests.e2e.conftest import System
from tests.e2e.support import agent_events, new_agent, send
from tests.e2e.test_evolution import decided
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply

pytestmark = pytest.mark.e2e


async def only_step(system: System, run_id: str) -> dict[str, Any]:
    (step,) = (await system.http.get(f"/v1/runs/{run_id}/steps")).json()
    found: dict[str, Any] = step
    return found


async def listed(system: System, agent_id: str, **params: Any) -> list[str]:
    response = await system.http.get("/v1/steps/", params={"agent_id": agent_id, **params})
    assert response.status_code == 200, response.text
    return [s["id"] for s in response.json()]


async def test_feedback_is_recorded_shown_and_filtered(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    aid = agent["id"]
    rated_run = (await send(system, aid, "rate me"))["usage"]["run_ids"][0]
    other_run = (await send(system, aid, "leave me"))["usage"]["run_ids"][0]
    step, other = await only_step(system, rated_run), await only_step(system, other_run)
    assert (step["feedback"], step["tags"]) == (None, [])
    assert await listed(system, aid, has_feedback=True) == []
    assert await listed(system, aid, feedback="positive") == []

    patched = await system.http.patch(
        f"/v1/steps/{step['id']}/feedback", json={"feedback": "positive", "tags": ["kind", "fast"]}
    )
    assert patched.status_code == 200, patched.text
    shown = patched.json()
    assert (shown["id"], shown["run_id"], shown["feedback"], shown["tags"]) == (
        step["id"],
        rated_run,
        "positive",
        ["kind", "fast"],
    )
    assert shown == (await system.http.get(f"/v1/steps/{step['id']}")).json()
    assert await listed(system, aid, feedback="positive") == [step["id"]]
    assert await listed(system, aid, feedback="negative") == []
    assert await listed(system, aid, has_feedback=True) == [step["id"]]
    assert await listed(system, aid, has_feedback=False) == [other["id"]]
    assert await listed(system, aid, tags=["fast"]) == [step["id"]]
    assert await listed(system, aid, tags=["slow", "kind"]) == [step["id"]]
    assert await listed(system, aid, tags=["slow"]) == []
    assert await listed(system, aid, trace_ids=["t-1"]) == []

    # Rated again through the official client: the rating is replaced, the tags kept
    # (none given); then cleared.
    client = system.client()
    again = await asyncio.to_thread(client.steps.feedback.create, step["id"], feedback="negative")
    assert (again.feedback, again.tags) == ("negative", ["kind", "fast"])
    assert await listed(system, aid, feedback="negative") == [step["id"]]
    assert await listed(system, aid, feedback="positive") == []
    cleared = await asyncio.to_thread(client.steps.feedback.create, step["id"])
    assert (cleared.feedback, cleared.tags) == (None, ["kind", "fast"])
    assert await listed(system, aid, has_feedback=True) == []
    by_run = (await system.http.get(f"/v1/runs/{rated_run}/steps")).json()
    assert [(s["feedback"], s["tags"]) for s in by_run] == [(None, ["kind", "fast"])]

    # Each request is one event on the run's subject, after the step's answer (here in
    # the run's RunCompleted: the answer that ended it).
    async with agent_events(system, aid) as events:
        await events.wait_for("StepFeedbackGiven", 3)
        seen = [e for e in events.seen if e.type in ("RunCompleted", "StepFeedbackGiven")]
    assert [(e.type, e.data.run_id) for e in seen] == [
        ("RunCompleted", rated_run),
        ("RunCompleted", other_run),
        ("StepFeedbackGiven", rated_run),
        ("StepFeedbackGiven", rated_run),
        ("StepFeedbackGiven", rated_run),
    ]
    assert seen[0].data.answer is not None and seen[0].data.answer.step_id == step["id"]
    assert [(e.data.feedback, e.data.tags) for e in seen[2:]] == [
        ("positive", ["kind", "fast"]),
        ("negative", None),
        (None, None),
    ]


async def test_feedback_on_a_step_of_a_named_conversation_is_on_its_subject(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    created = await system.http.post("/v1/conversations/", params={"agent_id": agent["id"]})
    assert created.status_code == 200, created.text
    conversation_id = created.json()["id"]
    sent = await system.http.post(
        f"/v1/conversations/{conversation_id}/messages",
        json={"messages": [{"role": "user", "content": "in here"}], "streaming": False},
    )
    assert sent.status_code == 200, sent.text
    (run_id,) = sent.json()["usage"]["run_ids"]
    step = await only_step(system, run_id)
    rated = await system.http.patch(
        f"/v1/steps/{step['id']}/feedback", json={"feedback": "negative", "tags": ["off"]}
    )
    assert (rated.json()["feedback"], rated.json()["tags"]) == ("negative", ["off"])
    async with agent_events(system, agent["id"], conversation_id) as events:
        await events.wait_for("StepFeedbackGiven")
    (given,) = [e for e in events.seen if e.type == "StepFeedbackGiven"]
    assert (given.data.step_id, given.aggregate_id, given.correlation_id) == (
        step["id"],
        agent["id"],
        run_id,
    )


async def test_feedback_for_an_unknown_step_or_with_a_bad_value_is_refused(
    system: System, llm: FakeOpenAI
) -> None:
    http = system.http
    missing = "step-00000000-0000-4000-8000-000000000000"
    unknown = await http.patch(f"/v1/steps/{missing}/feedback", json={"feedback": "positive"})
    assert unknown.status_code == 404 and missing in unknown.json()["detail"]
    not_an_id = await http.patch("/v1/steps/run-1/feedback", json={"feedback": "positive"})
    assert not_an_id.status_code == 422 and "step" in not_an_id.json()["detail"]

    agent = await new_agent(system)
    run_id = (await send(system, agent["id"], "hello"))["usage"]["run_ids"][0]
    step = await only_step(system, run_id)
    path = f"/v1/steps/{step['id']}/feedback"
    for body in (
        {"feedback": "neutral"},
        {"feedback": 1},
        {"tags": "kind"},
        {"tags": ["x" * 10_000]},
        {"feedback": "positive", "tags": ["bad\u0000tag"]},
    ):
        refused = await http.patch(path, json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["detail"], body
    assert (await http.patch(path)).status_code == 422
    # Nothing of it was recorded.
    shown = (await http.get(f"/v1/steps/{step['id']}")).json()
    assert (shown["feedback"], shown["tags"]) == (None, [])


def scripted(body: dict[str, Any]) -> Reply:
    """The agent echoes; the proposer appends a rule; the judge always prefers answer A
    (position bias: every case is a tie)."""
    first = str(body["messages"][0].get("content"))
    if first == RUBRIC:
        return Reply(content="A")
    if first == INSTRUCTIONS:
        op = {"op": "append_text", "target": "system", "text": "Be brief."}
        return Reply(content=json.dumps({"rationale": "users complained", "ops": [op]}))
    return echo_reply(body)


async def test_evolution_reads_feedback_per_run(system: System, llm: FakeOpenAI) -> None:
    llm.default_reply = scripted
    agent = await new_agent(system)
    aid = agent["id"]
    runs = [(await send(system, aid, f"question {i}"))["usage"]["run_ids"][0] for i in range(3)]
    bad, good, unrated = runs
    for run_id, rating in ((bad, "negative"), (good, "positive")):
        step = await only_step(system, run_id)
        rated = await system.http.patch(
            f"/v1/steps/{step['id']}/feedback", json={"feedback": rating}
        )
        assert rated.status_code == 200, rated.text
    base = f"/v1/agents/{aid}/evolution"
    config = await system.http.put(
        f"{base}/config",
        json={"enabled": True, "cases_per_evaluation": 3, "max_votes_per_conversation": 3},
    )
    assert config.status_code == 200, config.text

    # The proposer's digest (the agent's performance report) counts the ratings.
    made = await system.http.post(f"{base}/proposals", json={})
    assert made.status_code == 201, made.text
    (asked,) = [r for r in llm.requests if r["messages"][0]["content"] == INSTRUCTIONS]
    shown = str(asked["messages"][-1]["content"])
    assert "Recent runs (newest 3): 3 runs" in shown
    assert "feedback: 1 negative, 1 positive." in shown
    assert "- feedback:negative: 1 runs, 0 failed" in shown
    assert "- feedback:positive: 1 runs, 0 failed" in shown

    # (Evaluated at once, mode shadow.)
    result = await decided(system, aid, made.json()["id"])
    assert {c["case_id"]: c["feedback"] for c in result["cases"]} == {
        bad: "negative",
        good: "positive",
        unrated: None,
    }
    feedback_slices = {
        s["name"]: s["cases"]
        for s in result["report"]["slices"]
        if s["name"].startswith("feedback:")
    }
    assert feedback_slices == {"feedback:negative": 1, "feedback:positive": 1}
