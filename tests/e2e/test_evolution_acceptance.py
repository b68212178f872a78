"""Acceptance of self-evolution (issue 14) through the HTTP API against the five processes,
with the scripted LLM: a candidate better on average but clearly worse in one conversation
is rejected by its slice; a tool error vetoes what the judge prefers; thirty shadow cases
that used memory, archival and a user tool with effects leave the agent, its memory and
the sandbox as they were; one changed byte in a decision is named by verify; and the
same log with the same answers gives the same decisions and hashes."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import nats
import pytest

from o_contracts import subjects
from o_contracts.envelope import decode
from o_contracts.events import CandidateEvaluated, CaseEvaluated, PassageInserted
from o_contracts.events.evolution import EvolutionDecided
from o_contracts.evolution import VersionSpec
from o_evolution.chain import GENESIS, link_hash
from o_evolution.judge import RUBRIC
from o_memory.evolution_archive import passage_id_of
from o_runtime.eventlog import EventLog
from tests.e2e.conftest import System
from tests.e2e.support import new_agent, send, subject_events
from tests.e2e.test_evolution import PREFIX, RULE, decided, scripted
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply
from tests.servers import operator

pytestmark = pytest.mark.e2e

IMPORTANCE = "On the scale of 1 to 10"


def judged_answers(body: dict[str, Any]) -> tuple[str, str, str]:
    """The conversation and the two answers a judge request shows."""
    prompt = str(body["messages"][-1]["content"])
    conversation = prompt.split("Conversation:\n", 1)[1].split("\n\nAnswer A:", 1)[0]
    a = prompt.split("Answer A:\n", 1)[1].split("\n\nAnswer B:", 1)[0]
    b = prompt.split("Answer B:\n", 1)[1].split("\n\nWhich answer", 1)[0]
    return conversation, a, b


async def configure(system: System, agent_id: str, **config: Any) -> None:
    put = await system.http.put(
        PREFIX.format(agent_id) + "/config", json={"enabled": True, **config}
    )
    assert put.status_code == 200, put.text


async def propose(system: System, agent_id: str, text: str) -> dict[str, Any]:
    """An operator's proposal to append `text` to the system prompt, once it is decided."""
    made = await system.http.post(
        PREFIX.format(agent_id) + "/proposals",
        json={"patch": {"ops": [{"op": "append_text", "target": "system", "text": text}]}},
    )
    assert made.status_code == 201, made.text
    return await decided(system, agent_id, made.json()["id"])


# -- 1. a slice that clearly regresses -----------------------------------------------------

TAX = "tax question"


def greeting_hurts_tax_talk(body: dict[str, Any]) -> Reply:
    """The candidate greets by name (scripted); the judge likes that everywhere but in the
    conversation about taxes, where it prefers the parent's plain answer."""
    if str(body["messages"][0].get("content")) == RUBRIC:
        conversation, a, _ = judged_answers(body)
        wants_greeting = TAX not in conversation
        return Reply(content="A" if a.startswith("Hello Sam") == wants_greeting else "B")
    return scripted(body)


async def test_a_candidate_better_on_average_but_worse_in_one_conversation_is_rejected_naming_it(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = greeting_hurts_tax_talk
    aid = (await new_agent(system))["id"]
    opened = await system.http.post("/v1/conversations/", params={"agent_id": aid})
    assert opened.status_code == 200, opened.text
    taxes = opened.json()["id"]
    # Every third run is in the tax conversation: cases (oldest first) go win, win, loss.
    for i in range(12):
        if i % 3 == 2:
            sent = await system.http.post(
                f"/v1/conversations/{taxes}/messages",
                json={"messages": [{"role": "user", "content": f"{TAX} {i}"}], "streaming": False},
            )
            assert sent.status_code == 200, sent.text
        else:
            await send(system, aid, f"question {i}")
    await configure(system, aid, cases_per_evaluation=12, max_votes_per_conversation=8)

    result = await propose(system, aid, RULE)

    report = result["report"]
    assert result["status"] == "rejected"
    assert report["reason"] == f"slice conversation:{taxes} regresses: 0 wins, 4 losses (p = 0.062)"
    # On average the candidate gains (8 wins to 4 losses), and the SPRT has not decided.
    assert (report["wins"], report["losses"], report["ties"], report["inconclusive"]) == (
        8,
        4,
        0,
        0,
    )
    assert report["decision"] == "rejected"
    assert [(s["n"], s["wins"], s["losses"]) for s in report["sprt"]][-1] == (12, 8, 4)
    assert report["slices"] == [
        {
            "name": f"conversation:{taxes}",
            "cases": 4,
            "wins": 0,
            "losses": 4,
            "ties": 0,
            "regressed": True,
            "p_value": 1 / 16,
        },
        {
            "name": "conversation:default",
            "cases": 8,
            "wins": 8,
            "losses": 0,
            "ties": 0,
            "regressed": False,
            "p_value": 1.0,
        },
        {
            "name": "stop:end_turn",
            "cases": 12,
            "wins": 8,
            "losses": 4,
            "ties": 0,
            "regressed": False,
            "p_value": 3797 / 4096,  # P(X >= 4), X ~ Binomial(12, 1/2)
        },
    ]
    cases = result["cases"]
    assert [c["outcome"] for c in cases] == ["win", "win", "loss"] * 4
    assert [c["conversation_id"] for c in cases] == [None, None, taxes] * 4
    assert {(c["judged_parent_first"], c["judged_candidate_first"]) for c in cases[2::3]} == {
        ("A", "B")
    }
    assert all(c["veto"] is None for c in cases)


# -- 2. a veto overrides the judge ------------------------------------------------------------

CHECK = "Check your persona before answering question 1."


def candidate_breaks_a_tool(body: dict[str, Any]) -> Reply:
    """The candidate (its prompt carries CHECK) greets, and on "question 1" first calls
    memory_replace on text its persona does not hold: a tool error."""
    messages = body["messages"]
    last = messages[-1]
    if (
        CHECK in str(messages[0].get("content"))
        and last.get("role") == "user"
        and last.get("content") == "question 1"
    ):
        args = {"label": "persona", "old_string": "Grumpy.", "new_string": "Cheerful."}
        return Reply(tool_calls=[("memory_replace", args)])
    return scripted(body)


async def test_a_candidate_the_judge_prefers_loses_a_case_where_it_adds_a_tool_error(
    system: System, llm: FakeOpenAI
) -> None:
    llm.default_reply = candidate_breaks_a_tool
    aid = (await new_agent(system))["id"]
    for i in range(3):
        await send(system, aid, f"question {i}")
    await configure(system, aid, cases_per_evaluation=3, max_votes_per_conversation=3)

    result = await propose(system, aid, f"{RULE} {CHECK}")

    cases = result["cases"]
    # The judge prefers the candidate's greeting in every case, in both orders.
    assert [(c["judged_parent_first"], c["judged_candidate_first"]) for c in cases] == [
        ("B", "A")
    ] * 3
    assert [c["candidate"]["answer"] for c in cases] == [
        f"Hello Sam! echo: question {i}" for i in range(3)
    ]
    assert [(c["outcome"], c["veto"]) for c in cases] == [
        ("win", None),
        ("loss", "more tool errors: 1 > 0"),
        ("win", None),
    ]
    vetoed = cases[1]
    assert (vetoed["parent"]["tool_errors"], vetoed["candidate"]["tool_errors"]) == (0, 1)
    assert vetoed["candidate"]["tools_used"] == ["memory_replace"]
    assert (vetoed["candidate"]["stop_reason"], vetoed["candidate"]["steps"]) == ("end_turn", 2)
    report = result["report"]
    assert result["status"] == "rejected"
    assert (
        report["reason"] == "inconclusive after 3 cases: 2 wins, 1 losses, 0 ties, 0 inconclusive"
    )
    assert (report["wins"], report["losses"]) == (2, 1)
    # The failed edit happened only in the shadow's overlay (it would have failed anyway).
    persona = (await system.http.get(f"/v1/agents/{aid}/core-memory/blocks/persona")).json()
    assert persona["value"] == "Helpful."


# -- 3. nothing leaves the shadow ---------------------------------------------------------------

ORDER_TWO = "Order two of everything."


def order_tool_source(name: str) -> str:
    return (
        f"def {name}(item: str, quantity: int) -> str:\n"
        '    """Place an order with the shop: it is paid for and cannot be undone.\n\n'
        "    Args:\n"
        "        item: What to order.\n"
        "        quantity: How many.\n"
        '    """\n'
        '    return f"ordered {quantity} x {item}"\n'
    )


def task_action(i: int, order_tool: str, candidate: bool) -> tuple[str, dict[str, Any]]:
    """The tool call that answers "task i": a core memory edit (an append to the persona, or
    a replace in the human block), an archival insert or an order, in turn. The candidate
    edits memory differently (in its overlay, harmless), archives the same fact (the
    recorded result), and orders two (not run: inconclusive)."""
    if i % 6 == 0:
        note = f"Candidate note {i}." if candidate else f"Note {i}."
        return "core_memory_append", {"label": "persona", "content": note}
    if i % 6 == 3:
        visits = i // 6
        new = f"Visits: {visits + 1}{'!' if candidate else ''}"
        return "memory_replace", {
            "label": "human",
            "old_string": f"Visits: {visits}",
            "new_string": new,
        }
    if i % 3 == 1:
        return "archival_memory_insert", {"content": f"Fact {i}: Sam likes tea."}
    return order_tool, {"item": f"book {i}", "quantity": 2 if candidate else 1}


def doing_tasks(order_tool: str) -> Callable[[dict[str, Any]], Reply]:
    def reply(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        first = str(messages[0].get("content"))
        if first == RUBRIC:
            return Reply(content="A")  # a judge that favours position: every case a tie
        if first.startswith(IMPORTANCE):
            return Reply(content="1")
        last = messages[-1]
        if last.get("role") == "tool":
            return Reply(content=f"Done. {echo_reply(body).content}")
        i = int(str(last.get("content")).rsplit(" ", 1)[-1])
        return Reply(tool_calls=[task_action(i, order_tool, ORDER_TWO in first)])

    return reply


async def subject_count(system: System, stream: str, subject: str) -> int:
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        info = await nc.jetstream().stream_info(stream, subjects_filter=subject)
    finally:
        await nc.close()
    return sum((info.state.subjects or {}).values())


async def agent_executions(system: System, agent_id: str) -> int:
    """The agent's tool executions recorded (one subject each, its last event an outcome)."""
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        js = nc.jetstream()
        info = await js.stream_info(
            subjects.EVENTS_STREAM, subjects_filter=subjects.tool_execution_subject("*")
        )
        count = 0
        for subject in info.state.subjects or {}:
            last = decode((await js.get_last_msg(subjects.EVENTS_STREAM, subject)).data or b"")
            count += getattr(last.data, "agent_id", None) == agent_id
    finally:
        await nc.close()
    return count


async def everything_shown(system: System, agent_id: str) -> dict[str, Any]:
    """What the shadow must leave alone: the agent's log subject and its blocks', every
    projection the API shows of it (agent, runs, messages, blocks and their versions,
    archival passages but evolution's own notes), and the sandbox's executions."""
    http = system.http
    blocks = (await http.get(f"/v1/agents/{agent_id}/core-memory/blocks")).json()
    passages = (await http.get(f"/v1/agents/{agent_id}/archival-memory?limit=1000")).json()
    eventlog = await EventLog.connect(system.env["NATS_URL"], name="test-evolution-shown")
    try:
        agent_seq = await eventlog.last_seq(subjects.agent_subject(agent_id))
        block_seqs = {
            b["id"]: await eventlog.last_seq(subjects.block_subject(b["id"])) for b in blocks
        }
    finally:
        await eventlog.close()
    return {
        "agent_subject": agent_seq,
        "block_subjects": block_seqs,
        "agent": (await http.get(f"/v1/agents/{agent_id}")).json(),
        "runs": (await http.get(f"/v1/runs/?agent_id={agent_id}&limit=1000")).json(),
        "messages": (await http.get(f"/v1/agents/{agent_id}/messages?limit=1000")).json(),
        "blocks": blocks,
        "versions": {
            b["id"]: (await http.get(f"/v1/blocks/{b['id']}/versions")).json() for b in blocks
        },
        "passages": [p for p in passages if "evolution" not in p["tags"]],
        "sandbox_commands": await agent_executions(system, agent_id),
        "sandbox_executions": await subject_count(
            system, subjects.EVENTS_STREAM, subjects.tool_execution_subject("*")
        ),
    }


async def test_thirty_shadow_cases_with_memory_archival_and_a_side_effecting_tool_change_nothing(
    system: System, llm: FakeOpenAI
) -> None:
    name = f"place_order_{uuid.uuid4().hex[:8]}"
    tool = await system.http.post("/v1/tools/", json={"source_code": order_tool_source(name)})
    assert tool.status_code == 200, tool.text
    agent = await new_agent(
        system,
        tools=["core_memory_append", "archival_memory_insert"],
        tool_ids=[tool.json()["id"]],
        embedding="openai/text-embedding-3-small",
        memory_blocks=[
            {"label": "human", "value": "Name: Sam\nVisits: 0"},
            {"label": "persona", "value": "Helpful."},
        ],
    )
    aid = agent["id"]
    llm.default_reply = doing_tasks(name)
    for i in range(30):
        result = await send(system, aid, f"task {i}")
        returned = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
        assert [r["status"] for r in returned] == ["success"], result
    await configure(system, aid, cases_per_evaluation=30, max_votes_per_conversation=30)
    before = await everything_shown(system, aid)
    # The recorded runs did have effects: ten orders in the sandbox, ten facts archived,
    # five edits of each block (after its first version).
    assert (before["sandbox_commands"], len(before["passages"])) == (10, 10)
    assert {b["label"]: len(before["versions"][b["id"]]) for b in before["blocks"]} == {
        "human": 6,
        "persona": 6,
    }
    assert {b["label"]: b["value"] for b in before["blocks"]}["human"] == "Name: Sam\nVisits: 5"
    eventlog = await EventLog.connect(system.env["NATS_URL"], name="test-evolution-archive")
    try:
        archived = await eventlog.last_seq(subjects.archival_subject(aid))
    finally:
        await eventlog.close()

    result = await propose(system, aid, ORDER_TWO)

    cases = result["cases"]
    assert len(cases) == 30
    assert [c["parent"]["tools_used"] for c in cases] == [
        [task_action(i, name, False)[0]] for i in range(30)
    ]
    assert all(c["parent"]["inconclusive"] is None for c in cases)
    assert {
        (c["judged_parent_first"], c["judged_candidate_first"])
        for c in cases
        if c["outcome"] == "tie"
    } == {("A", "A")}
    # The recorded results and the overlay answer every call but the candidate's orders.
    assert [(c["parent"]["tool_errors"], c["candidate"]["tool_errors"]) for c in cases] == [
        (0, 1) if i % 3 == 2 else (0, 0) for i in range(30)
    ]
    not_run = f"tool '{name}' not executed in shadow"
    assert [(c["outcome"], c["veto"]) for c in cases] == [
        ("inconclusive", f"candidate inconclusive: {not_run}") if i % 3 == 2 else ("tie", None)
        for i in range(30)
    ]
    assert [c["candidate"]["inconclusive"] for c in cases] == [
        not_run if i % 3 == 2 else None for i in range(30)
    ]
    report = result["report"]
    assert result["status"] == "rejected"
    assert (
        report["reason"]
        == "inconclusive after 30 cases: 0 wins, 0 losses, 20 ties, 10 inconclusive"
    )
    # Nothing of the shadow reached the agent, its memory, its archive or the sandbox.
    assert await everything_shown(system, aid) == before
    # The archive took only evolution's own notes of its decisions (the last: the gate's).
    eventlog = await EventLog.connect(system.env["NATS_URL"], name="test-evolution-archive")
    try:
        gated = decode(
            (
                await eventlog.js.get_last_msg(
                    subjects.EVENTS_STREAM, subjects.evolution_subject(aid)
                )
            ).data
            or b""
        )
        assert isinstance(gated.data, CandidateEvaluated)
        async with subject_events(system, subjects.archival_subject(aid)) as archive:
            await archive.wait_until(
                lambda e: (
                    isinstance(e.data, PassageInserted)
                    and e.data.passage.passage_id == passage_id_of(gated.id)
                )
            )
        added = [
            decode(raw.data).data
            async for raw in eventlog.replay(subjects.archival_subject(aid), archived + 1)
        ]
    finally:
        await eventlog.close()
    assert added and all(
        isinstance(e, PassageInserted) and e.passage.tags == ["evolution"] for e in added
    ), added


# -- 4. one changed byte is named ------------------------------------------------------------


async def evaluated(system: System, llm: FakeOpenAI, runs: int = 4) -> tuple[str, dict[str, Any]]:
    """An agent with `runs` recorded runs, and an operator's proposal (greet by name)
    evaluated on all of them: the judge prefers it each time, too few cases to accept."""
    llm.default_reply = scripted
    aid = (await new_agent(system))["id"]
    for i in range(runs):
        await send(system, aid, f"question {i}")
    await configure(system, aid, cases_per_evaluation=runs, max_votes_per_conversation=runs)
    proposal = await propose(system, aid, RULE)
    assert proposal["report"]["reason"] == (
        f"inconclusive after {runs} cases: {runs} wins, 0 losses, 0 ties, 0 inconclusive"
    )
    return aid, proposal


async def test_one_byte_changed_in_a_recorded_decision_is_named_by_verify(
    system: System, llm: FakeOpenAI
) -> None:
    aid, proposal = await evaluated(system, llm)
    verify = PREFIX.format(aid) + "/verify"
    # EvolutionConfigured, ChangeProposed, EvaluationStarted, 4 CaseEvaluated, CandidateEvaluated.
    intact = (await system.http.get(verify)).json()
    assert (intact["ok"], intact["links"], intact["broken"]) == (True, 8, None)
    history = (await system.http.get(PREFIX.format(aid) + "/history")).json()
    assert intact["last_hash"] == history[-1]["hash"]
    subject = subjects.evolution_subject(aid)
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        js = nc.jetstream()
        recorded = await js.get_last_msg(subjects.EVENTS_STREAM, subject)
        assert recorded.data is not None and recorded.seq is not None
        original = decode(recorded.data).data
        assert isinstance(original, CandidateEvaluated)
        assert original.proposal_id == proposal["id"] and original.report.wins == 4
        # The gate's tally of wins, 4 (a MessagePack fixint), made 5: one byte.
        at = recorded.data.index(b"\xa4wins\x04") + len(b"\xa4wins")
        tampered = recorded.data[:at] + b"\x05" + recorded.data[at + 1 :]
        assert sum(a != b for a, b in zip(recorded.data, tampered, strict=True)) == 1
        forged = decode(tampered).data
        assert isinstance(forged, CandidateEvaluated) and forged.report.wins == 5
        assert (forged.prev_hash, forged.hash) == (original.prev_hash, original.hash)

        # Appended as a copy (JetStream edits nothing in place): its link is broken.
        copy = await js.publish(subject, tampered, stream=subjects.EVENTS_STREAM)
        assert (await system.http.get(verify)).json() == {
            "ok": False,
            "links": 9,
            "broken": {
                "seq": copy.seq,
                "type": "CandidateEvaluated",
                "reason": f"prev_hash does not match the hash of seq {recorded.seq}",
            },
        }
        # (Put in the original's place, its link would hold and its hash not: verify
        # names that too (tests/unit: chain). Not done here: deleting from the log would
        # also make the projections differ from a rebuild, which test_operations checks.)
    finally:
        await nc.close()


# -- 5. determinism -----------------------------------------------------------------------------


def untimed(case: dict[str, Any]) -> dict[str, Any]:
    """A case without its arms' wall times (the only measurement that is not the log's)."""
    return case | {arm: case[arm] | {"latency_ms": None} for arm in ("parent", "candidate")}


async def test_the_same_log_and_answers_give_the_same_decisions_and_hashes(
    system: System, llm: FakeOpenAI
) -> None:
    aid, first = await evaluated(system, llm)
    # The same patch again: the same candidate version (its id is its content's hash),
    # evaluated on the same runs with the same answers.
    second = await propose(system, aid, RULE)
    assert second["id"] != first["id"]
    assert (second["parent_version"], second["candidate_version"]) == (
        first["parent_version"],
        first["candidate_version"],
    )
    versions = (await system.http.get(PREFIX.format(aid) + "/versions")).json()
    specs = {v["version_id"]: v["spec"] for v in versions["versions"]}
    assert (
        VersionSpec.model_validate(specs[first["candidate_version"]]).version_id
        == (first["candidate_version"])
    )
    assert [untimed(c) for c in second["cases"]] == [untimed(c) for c in first["cases"]]
    assert second["report"] | {"latency_ratio": None} == first["report"] | {"latency_ratio": None}

    # Every hash on the log is its content's, linked to the one before.
    eventlog = await EventLog.connect(system.env["NATS_URL"], name="test-evolution-rehash")
    try:
        decisions = [
            decode(raw.data).data async for raw in eventlog.replay(subjects.evolution_subject(aid))
        ]
    finally:
        await eventlog.close()
    assert [type(d).__name__ for d in decisions] == [
        "EvolutionConfigured",
        *["ChangeProposed", "EvaluationStarted", *["CaseEvaluated"] * 4, "CandidateEvaluated"] * 2,
    ]
    prev = GENESIS
    for decision in decisions:
        assert isinstance(decision, EvolutionDecided)
        assert decision.prev_hash == prev
        assert link_hash(decision.prev_hash, decision.chain_payload()) == decision.hash
        prev = decision.hash

    # The second evaluation's decisions, put in the first's place (its proposal id, its
    # predecessor, its wall times), are the first's to the hash.
    def evaluation(proposal_id: str) -> list[CaseEvaluated | CandidateEvaluated]:
        return [
            d
            for d in decisions
            if isinstance(d, CaseEvaluated | CandidateEvaluated) and d.proposal_id == proposal_id
        ]

    for one, two in zip(evaluation(first["id"]), evaluation(second["id"]), strict=True):
        moved: EvolutionDecided
        if isinstance(one, CaseEvaluated):
            assert isinstance(two, CaseEvaluated)
            timed = {
                arm: getattr(two.case, arm).model_copy(
                    update={"latency_ms": getattr(one.case, arm).latency_ms}
                )
                for arm in ("parent", "candidate")
            }
            case = two.case.model_copy(update=timed)
            moved = two.model_copy(update={"proposal_id": one.proposal_id, "case": case})
        else:
            assert isinstance(two, CandidateEvaluated)
            report = two.report.model_copy(update={"latency_ratio": one.report.latency_ratio})
            moved = two.model_copy(update={"proposal_id": one.proposal_id, "report": report})
        assert moved.chained(one.prev_hash, link_hash).hash == one.hash
