"""The chaos harness's own logic, without a system: the scripted LLM, the verdicts, the schedule."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from chaos.blocklog import BlockEvent
from chaos.checks import AgentView, FolderView, Imported, after_rebuild, evaluate
from chaos.evolution_checks import (
    EvolutionView,
    canary_problems,
    proposal_body,
    rollback_problems,
    rolled_back_by,
)
from chaos.killer import TARGETS, schedule
from chaos.llm import answer, call_id, evolved_mark, stream_chunks, token_for
from chaos.load import (
    Attempt,
    Clock,
    Load,
    LoadSettings,
    Request,
    Shares,
    StreamCut,
    file_text,
)
from chaos.report import longest_gap
from chaos.snapshot import Difference, _keyed, diff, run_statuses
from o_evolution.judge import RUBRIC
from o_evolution.judge import prompt as judge_prompt

AGENT = "agent-00000000-0000-4000-8000-000000000001"
BLOCK = "block-00000000-0000-4000-8000-000000000001"


def test_the_llm_asks_for_the_edit_once_then_answers_text() -> None:
    token = token_for(3, 12)
    assert token == "T003n000012"
    request = {"messages": [{"role": "system", "content": "..."}, user(f"remember {token}")]}
    first = answer(request)
    assert first == answer(json.loads(json.dumps(request)))  # a pure function
    call = first["tool_calls"][0]
    assert call["id"] == call_id(token)
    assert json.loads(call["function"]["arguments"]) == {
        "label": "human",
        "new_string": token,
        "insert_line": -1,
    }
    request["messages"] += [first, {"role": "tool", "tool_call_id": call_id(token), "content": ""}]
    assert answer(request) == {"role": "assistant", "content": f"ok {token}"}
    assert answer({"messages": [user(f"say {token}")]})["content"] == f"ok {token}"


def test_a_misfiled_edit_goes_to_a_block_the_agent_lacks_then_answers_text() -> None:
    token = token_for(2, 5)
    request = {"messages": [user(f"misfile {token}")]}
    call = answer(request)["tool_calls"][0]
    assert json.loads(call["function"]["arguments"])["label"] == "nowhere"
    refusal = {"role": "tool", "tool_call_id": call_id(token), "content": "no memory block"}
    request["messages"] += [answer(request), refusal]
    assert answer(request) == {"role": "assistant", "content": f"ok {token}"}


def test_a_refused_edit_is_whole_with_its_call_and_nothing_in_the_block() -> None:
    whole, callless = request(1, memory=False), request(2, memory=False)
    whole.refused = callless.refused = True
    plain_with_a_call = request(3, memory=False)
    assert (whole.text, whole.kind) == (f"misfile {whole.token}", "sync refused")
    messages = [
        *history(whole, "run-1"),
        *[m for m in history(callless, "run-2") if m["message_type"] != "tool_call_message"],
        *history(plain_with_a_call, "run-3"),
    ]
    view = AgentView(AGENT, messages, {"id": BLOCK, "value": "", "version": 1}, [], [])
    verdicts = evaluate([whole, callless, plain_with_a_call], {AGENT: view}, {}, 0.0)
    assert [f.request for f in verdicts.lost] == [callless]
    assert verdicts.lost[0].cause == "the run never called the memory tool"
    assert [f.request for f in verdicts.duplicated] == [plain_with_a_call]


def test_compute_calls_the_users_tool_then_answers_text() -> None:
    token = token_for(4, 2)
    request = {"messages": [user(f"compute {token}")]}
    call = answer(request)["tool_calls"][0]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == (
        "chaos_echo",
        {"text": token},
    )
    result = {"role": "tool", "tool_call_id": call_id(token), "content": f"echoed {token}"}
    request["messages"] += [answer(request), result]
    assert answer(request) == {"role": "assistant", "content": f"ok {token}"}


def test_a_tool_request_is_whole_only_with_one_call_and_its_echo() -> None:
    whole, failed, twice = (request(n, memory=False) for n in (1, 2, 3))
    for r in (whole, failed, twice):
        r.tool = True
    assert (whole.text, whole.kind) == (f"compute {whole.token}", "sync tool")

    def returned(r: Request, run_id: str, status: str, text: str) -> dict[str, Any]:
        return {
            "run_id": run_id,
            "id": f"m-{run_id}-r",
            "message_type": "tool_return_message",
            "tool_call_id": call_id(r.token),
            "status": status,
            "tool_return": text,
        }

    messages = [
        *history(whole, "run-1"),
        returned(whole, "run-1", "success", f"echoed {whole.token}"),
        *history(failed, "run-2"),
        returned(failed, "run-2", "error", "interrupted"),
        *history(twice, "run-3"),
        returned(twice, "run-3", "success", f"echoed {twice.token}"),
        returned(twice, "run-3", "success", f"echoed {twice.token}"),
    ]
    view = AgentView(AGENT, messages, {"id": BLOCK, "value": "", "version": 1}, [], [])
    verdicts = evaluate([whole, failed, twice], {AGENT: view}, {}, 0.0)
    assert [f.request for f in verdicts.lost] == [failed]
    assert verdicts.lost[0].cause == (
        "the users' tool's result is not its success (results: error: interrupted)"
    )
    assert [f.request for f in verdicts.duplicated] == [twice]


def test_an_archive_request_is_whole_with_one_passage_holding_its_token() -> None:
    token = token_for(5, 1)
    call = answer({"messages": [user(f"archive {token}")]})["tool_calls"][0]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == (
        "archival_memory_insert",
        {"content": token},
    )
    whole, unstored, doubled = (request(n, memory=False) for n in (1, 2, 3))
    for r in (whole, unstored, doubled):
        r.archive = True
    assert (whole.text, whole.kind) == (f"archive {whole.token}", "sync archival")
    plain = request(4, memory=False)
    all_four = (whole, unstored, doubled, plain)
    messages = [m for i, r in enumerate(all_four) for m in history(r, f"run-{i}")]
    passages = [{"id": f"passage-{t}", "text": t} for t in (whole.token, doubled.token)]
    passages += [{"id": "passage-again", "text": doubled.token}, {"id": "p", "text": plain.token}]
    view = AgentView(AGENT, messages, {"id": BLOCK, "value": "", "version": 1}, [], [], passages)
    verdicts = evaluate(list(all_four), {AGENT: view}, {}, 0.0)
    assert [f.request for f in verdicts.lost] == [unstored]
    assert verdicts.lost[0].cause == "no passage holds the token (the insert's results: none)"
    assert [f.request for f in verdicts.duplicated] == [doubled, plain]
    assert verdicts.duplicated[0].cause == "one archival insert stored more than one passage"


def test_an_upload_is_whole_as_one_processed_file_with_one_chunk_holding_its_token() -> None:
    folder = "source-00000000-0000-4000-8000-000000000001"
    whole, unfinished, doubled, unchunked, unsent = (request(n, memory=False) for n in range(5))
    for r in (whole, unfinished, doubled, unchunked, unsent):
        r.folder_id = folder
    unsent.acked_at, unsent.attempts = None, [Attempt(4, 4.1, None, "ConnectError")]
    plain = request(5, memory=False)
    assert (whole.kind, whole.file_name) == ("sync upload", f"{whole.token}.txt")
    assert file_text(whole.token).count(whole.token) == 1

    def file(r: Request, n: int, status: str = "completed") -> dict[str, Any]:
        return {
            "id": f"file-{n}",
            "source_id": folder,
            "file_name": r.file_name,
            "original_file_name": r.file_name,
            "processing_status": status,
        }

    def chunk(r: Request, n: int) -> dict[str, Any]:
        return {"id": f"chunk-{n}", "source_id": folder, "text": file_text(r.token)}

    files = [file(whole, 1), file(unfinished, 2, "embedding"), file(doubled, 3)]
    files += [file(doubled, 4), file(unchunked, 5), file(unsent, 6)]
    chunks = [chunk(whole, 1), chunk(doubled, 3), chunk(doubled, 4), chunk(unsent, 6)]
    chunks.append(chunk(plain, 7))
    view = AgentView(AGENT, history(plain, "run-1"), {"id": BLOCK, "value": ""}, [], [])
    folders = {folder: FolderView(folder, files, chunks)}
    verdicts = evaluate(
        [whole, unfinished, doubled, unchunked, unsent, plain],
        {AGENT: view},
        {},
        0.0,
        folders=folders,
    )
    assert [(f.request, f.cause) for f in verdicts.lost] == [
        (unfinished, "the file's processing did not complete (embedding)"),
        (unchunked, "the file completed, but no chunk holds its token"),
    ]
    assert [(f.request, f.cause) for f in verdicts.duplicated] == [
        (doubled, "a retried upload (duplicate_handling=skip) made a second file"),
        (plain, "a file or chunk holds the token of a request that uploaded none"),
    ]
    # An unacknowledged upload that happened is neither lost nor duplicated.
    assert verdicts.partial == []


def test_an_import_is_whole_as_one_agent_of_its_name_with_the_templates_memory() -> None:
    blocks = {"human": "chaos tokens:", "persona": "I answer briefly."}
    history = [("user_message", "hello template"), ("assistant_message", "ok")]
    template = Imported("agent-t", "chaos-template", blocks, history)
    whole, absent, doubled, forgetful, unsent = (request(n, memory=False) for n in range(5))
    for r in (whole, absent, doubled, forgetful, unsent):
        r.import_name = f"chaos-import-{r.token}"
    unsent.acked_at, unsent.attempts = None, [Attempt(4, 4.1, None, "ReadError")]
    assert (whole.kind, whole.text) == ("sync import", f"import {whole.token}")

    def made(r: Request, n: int, kept: list[tuple[str, str]] = history) -> Imported:
        return Imported(f"agent-{n}", r.import_name or "", blocks, kept)

    imports = {
        r.import_name or "": agents
        for r, agents in [
            (whole, [made(whole, 1)]),
            (doubled, [made(doubled, 2), made(doubled, 3)]),
            (forgetful, [made(forgetful, 4, history[:1])]),
            (unsent, [made(unsent, 5)]),
        ]
    }
    view = AgentView(AGENT, [], {"id": BLOCK, "value": ""}, [], [])
    verdicts = evaluate(
        [whole, absent, doubled, forgetful, unsent],
        {AGENT: view},
        {},
        0.0,
        imports=imports,
        template=template,
    )
    assert [(f.request, f.cause) for f in verdicts.lost] == [
        (absent, "no agent of the import's name"),
        (forgetful, "the imported agent's history is not the template's"),
    ]
    assert [(f.request, f.cause) for f in verdicts.duplicated] == [
        (doubled, "a retried import (same Idempotency-Key) made a second agent")
    ]
    assert verdicts.partial == []


def test_a_proposal_is_whole_once_decided_with_its_cases_each_once() -> None:
    whole, absent, doubled, undecided, miscounted = (request(n, memory=False) for n in range(5))
    for r in (whole, absent, doubled, undecided, miscounted):
        r.propose = True
    plain = request(5, memory=False)
    assert (whole.kind, whole.text) == ("sync proposal", f"propose {whole.token}")
    assert whole.token in proposal_body(whole.token)["patch"]["ops"][0]["text"]

    def proposal(r: Request, n: int, status: str = "rejected", cases: int = 2) -> dict[str, Any]:
        return {
            "id": f"proposal-{n}",
            "status": status,
            "rationale": proposal_body(r.token)["patch"]["rationale"],
            "cases": [{"n": k} for k in range(cases)],
        }

    twice = proposal(miscounted, 6)
    twice["cases"].append({"n": 1})
    proposals = [proposal(whole, 1), proposal(doubled, 2), proposal(doubled, 3), twice]
    proposals += [proposal(undecided, 4, "evaluating", 1), proposal(plain, 5, "proposed", 0)]
    decided = [{"type": "ChangeProposed"}, {"type": "CaseEvaluated"}]
    chains = {
        # One note for the two decisions (cases make none), and a note in the wrong place:
        AGENT: EvolutionView(AGENT, proposals, {"ok": True}, decided, notes=1),
        "agent-b": EvolutionView("agent-b", [], {"ok": False}, decided, notes=0),
        "agent-c": EvolutionView("agent-c", [], {"ok": True}, decided, notes=2),
    }
    view = AgentView(AGENT, history(plain, "run-1"), {"id": BLOCK, "value": ""}, [], [])
    requests = [whole, absent, doubled, undecided, miscounted, plain]
    verdicts = evaluate(requests, {AGENT: view}, {}, 0.0, evolved=chains)
    assert [(f.request, f.cause) for f in verdicts.lost] == [
        (absent, "no proposal holds the token"),
        (undecided, "the proposal is still being evaluated"),
        (None, "a decision's note never written"),
    ]
    assert [(f.request, f.cause) for f in verdicts.duplicated] == [
        (doubled, "a retried proposal (same Idempotency-Key) made a second one"),
        (miscounted, "an evaluation's case recorded twice, or skipped"),
        (plain, "a proposal holds the token of a message"),
        (None, "a decision's note written twice"),
    ]
    assert [f.cause for f in verdicts.versions] == [
        "the evolution chain does not verify on the log"
    ]


async def test_a_stream_is_acknowledged_at_its_done_and_retried_if_cut_before() -> None:
    # (The harness's reading of SSE, against canned bodies: what O streams is the e2e
    # tests' and the chaos run's business.)
    events = [
        {"message_type": "assistant_message", "content": "ok T", "run_id": "run-1"},
        {"message_type": "stop_reason", "stop_reason": "end_turn"},
    ]
    whole = "".join(f"data: {json.dumps(e)}\n\n" for e in events)

    def serve(body: str) -> httpx.AsyncClient:
        def answer(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

        return httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url="http://o")

    settings = LoadSettings(seed=1, duration=1, clients=1)
    async with serve(whole + "data: [DONE]\n\n") as http:
        load = Load(http, [AGENT], settings, Clock())
        done = await load._streamed("/v1/x", {}, {})
    r = request(1, memory=False)
    r.mode = "stream"
    load._read_answer(r, done)
    assert (r.run_ids, r.stop_reason) == (["run-1"], "end_turn")
    async with serve(whole) as http:
        with pytest.raises(StreamCut):
            await Load(http, [AGENT], settings, Clock())._streamed("/v1/x", {}, {})


def test_one_draw_divides_into_the_kinds_by_their_shares() -> None:
    shares = Shares(
        memory=0.5, refused=0.1, tool=0.1, archive=0.1, upload=0.05, import_=0.05, propose=0.02
    )
    draws = [0.0, 0.49, 0.5, 0.59, 0.61, 0.75, 0.8, 0.84, 0.86, 0.89, 0.905, 0.915, 0.93, 0.99]
    assert [shares.kind(d) for d in draws] == [
        "memory",
        "memory",
        "refused",
        "refused",
        "tool",
        "archive",
        "upload",
        "upload",
        "import_",
        "import_",
        "propose",
        "propose",
        "plain",
        "plain",
    ]


def test_another_draw_divides_into_the_ways_of_sending() -> None:
    shares = Shares(async_=0.3, stream=0.2, schedule=0.1)
    load = Load(httpx.AsyncClient(), [AGENT], LoadSettings(1, 1, 1, shares), Clock())
    draws = [0.0, 0.29, 0.3, 0.49, 0.5, 0.59, 0.61, 0.99]
    assert [load._mode(d) for d in draws] == [
        "async",
        "async",
        "stream",
        "stream",
        "schedule",
        "schedule",
        "sync",
        "sync",
    ]


def test_the_streamed_answer_carries_the_same_call() -> None:
    message = answer({"messages": [user(f"remember {token_for(1, 1)}")]})
    arguments, name = "", ""
    for line in stream_chunks(message, "m").decode().split("\n\n"):
        if not line.startswith("data: {"):
            continue
        for choice in json.loads(line[6:])["choices"]:
            for call in choice["delta"].get("tool_calls") or []:
                name += call.get("function", {}).get("name") or ""
                arguments += call.get("function", {}).get("arguments") or ""
    assert name == "memory_insert"
    assert arguments == message["tool_calls"][0]["function"]["arguments"]


def test_the_verdicts_name_lost_duplicated_and_stuck() -> None:
    fine, doubled, lost, unsent = (request(n, memory=True) for n in range(1, 5))
    unsent.acked_at = None
    messages = [
        *history(fine, "run-1"),
        *history(doubled, "run-2"),
        *history(doubled, "run-3"),
        *history(lost, "run-4"),
    ]
    value = f"chaos tokens:\n{fine.token}\n{doubled.token}\n{doubled.token}"
    versions = [version(1, "chaos tokens:"), version(2, value), version(2, value)]
    runs = [{"id": "run-5", "agent_id": AGENT, "status": "running", "created_at": None}]
    view = AgentView(AGENT, messages, {"id": BLOCK, "value": value, "version": 2}, versions, runs)
    log = [
        BlockEvent(10, "BlockUpdated", 2, "t", "agent", AGENT, "memory_insert", lost.token),
        BlockEvent(11, "BlockUpdated", 2, "t", "agent", AGENT, "memory_insert", value),
    ]
    verdicts = evaluate([fine, doubled, lost, unsent], {AGENT: view}, {}, 0.0, {BLOCK: log})
    assert [f.request for f in verdicts.duplicated] == [doubled]
    assert (
        verdicts.duplicated[0].cause == "a retry (same otid and Idempotency-Key) ran as a new run"
    )
    assert [f.request for f in verdicts.lost] == [lost]
    assert verdicts.lost[0].text.endswith("missing memory edit")
    assert verdicts.lost[0].cause.startswith("two BlockUpdated events for one version")
    assert any("seq 10 BlockUpdated v2" in line for line in verdicts.lost[0].details)
    assert [f.text.split(" of ")[0] for f in verdicts.stuck] == ["run run-5"]
    problems = " | ".join(f.text for f in verdicts.versions)
    assert "repeated [2]" in problems
    assert "the log holds 2 events for version 2" in problems


def test_a_stuck_run_that_ended_before_the_rebuild_is_called_late_not_lost() -> None:
    late, lost = (
        {"id": rid, "agent_id": AGENT, "status": "running", "created_at": None}
        for rid in ("run-late", "run-lost")
    )
    view = AgentView(AGENT, [], {"id": BLOCK, "value": "", "version": 1}, [], [late, lost])
    verdicts = evaluate([], {AGENT: view}, {}, 0.0)
    assert [f.run_id for f in verdicts.stuck] == ["run-late", "run-lost"]
    # Just before the rebuild the live projection showed the first run ended, not the second;
    # the rebuild shows both ended.
    # (in `snapshot`'s shape: its runs keyed as it keys them)
    runs_before = [{**late, "status": "completed"}, lost]
    before = {"agents": {AGENT: {"runs": _keyed(runs_before, "id")}}}
    ended = [{**run, "status": "completed"} for run in (late, lost)]
    rebuilt = AgentView(AGENT, [], {"id": BLOCK, "value": "", "version": 1}, [], ended)
    after_rebuild(verdicts, {AGENT: rebuilt}, None, run_statuses(before))
    by_run = {f.run_id: f.cause for f in verdicts.stuck}
    assert by_run["run-late"].startswith("the run ended late")
    assert by_run["run-lost"].startswith("the live runs projection lost the run's end")


def test_the_kill_schedule_depends_only_on_the_seed() -> None:
    def first(seed: int) -> list[tuple[float, str, float]]:
        plan = schedule(seed, list(TARGETS), 5.0)
        return [next(plan) for _ in range(20)]

    assert first(7) == first(7) != first(8)
    assert {t for _, t, _ in first(7)[: len(TARGETS)]} == set(TARGETS)


def test_the_longest_unavailability_counts_the_edges() -> None:
    assert longest_gap([1.0, 2.0, 9.0], 10.0) == (7.0, 2.0, 9.0)
    assert longest_gap([], 10.0) == (10.0, 0.0, 10.0)


def test_a_rebuild_difference_names_the_tokens() -> None:
    before = {"v": "chaos tokens:\n" + "\n".join(token_for(1, n) for n in range(40))}
    after = {"v": before["v"].replace(token_for(1, 7), token_for(2, 7))}
    (difference,) = diff(before, after)
    assert isinstance(difference, Difference)
    assert "tokens only before: ['T001n000007'], only after: ['T002n000007']" in (
        difference.describe()
    )


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def request(n: int, memory: bool) -> Request:
    r = Request(token_for(0, n), AGENT, memory, "sync", 0, f"otid-{n}", f"key-{n}")
    r.attempts = [Attempt(n, n + 0.1, 200)]
    r.acked_at = n + 0.1
    return r


def history(r: Request, run_id: str) -> list[dict[str, Any]]:
    base = {"run_id": run_id}
    return [
        {**base, "id": f"m-{run_id}-1", "message_type": "user_message", "content": r.text},
        {
            **base,
            "id": f"m-{run_id}-2",
            "message_type": "tool_call_message",
            "tool_calls": [{"name": "memory_insert", "arguments": json.dumps({"x": r.token})}],
        },
        {**base, "id": f"m-{run_id}-3", "message_type": "assistant_message"}
        | {"content": f"ok {r.token}"},
    ]


def version(n: int, value: str) -> dict[str, Any]:
    return {"version": n, "value": value, "actor": "agent", "tool_name": "memory_insert"}


def test_an_evolved_agent_answers_with_its_marks_and_the_judge_prefers_more() -> None:
    token, a, b = token_for(1, 1), token_for(1, 2), token_for(1, 3)
    system = f"persona: {evolved_mark(a)} {evolved_mark(b)}"
    said = answer({"messages": [{"role": "system", "content": system}, user(f"say {token}")]})
    assert said["content"] == f"ok {token} v2"

    def judged(first: str, second: str) -> str:
        prompt = judge_prompt("conversation", first, second)
        asked = {"messages": [{"role": "system", "content": RUBRIC}, user(prompt)]}
        return str(answer(asked)["content"])

    assert judged(f"ok {token} v1", f"ok {token}") == "A"
    assert judged(f"ok {token}", f"ok {token} v2") == "B"
    assert judged(f"ok {token} v1", f"ok {token} v1") == "tie"


def test_canaries_and_promotions_are_checked_against_the_persona() -> None:
    promoted, stray, doubled = token_for(2, 1), token_for(2, 2), token_for(2, 3)
    proposals = [
        {"id": "p-1", "status": "promoted", "rationale": f"chaos proposal {promoted}"},
        {"id": "p-2", "status": "aborted", "rationale": f"chaos proposal {stray}"},
        {"id": "p-3", "status": "promoted", "rationale": f"chaos proposal {doubled}"},
    ]
    persona = f"x\n{evolved_mark(promoted)}\n{evolved_mark(stray)}\n" + evolved_mark(doubled) * 2

    def decided(kind: str, weight: float | None = None) -> dict[str, Any]:
        return {"type": kind, "weight": weight}

    rollouts = [
        {
            "rollout_id": "r-1",
            "status": "promoted",
            "decisions": [
                decided("RolloutStarted", 50),
                decided("RolloutAdvanced", 100),
                decided("RolloutCompleted"),
            ],
        },
        {
            "rollout_id": "r-2",
            "status": "running",
            "decisions": [decided("RolloutStarted", 50), decided("RolloutAdvanced", 50)],
        },
        {
            "rollout_id": "r-3",
            "status": "aborted",
            "decisions": [
                decided("RolloutStarted", 50),
                decided("RolloutAborted", 50),
                decided("RolloutAdvanced", 100),
            ],
        },
        {"rollout_id": "r-4", "status": "completed", "decisions": [decided("RolloutStarted", 5)]},
    ]
    history = [
        {"type": "VersionPromoted", "decision": {"version_id": "version-2", "proposal_id": p}}
        for p in ("p-1", "p-3")
    ]
    versions = {"serving": "version-1", "versions": []}
    view = EvolutionView(AGENT, proposals, {"ok": True}, history, 0, rollouts, versions, persona)
    found = [(p.category, p.cause) for p in canary_problems(view)]
    assert found == [
        ("duplicated", "a change served without its promotion"),
        ("duplicated", "a promotion's change made twice"),
        ("versions", "two canaries in progress at once"),
        ("versions", "weights [50.0, 50.0] do not rise"),
        (
            "versions",
            "decisions ['RolloutStarted', 'RolloutAborted', 'RolloutAdvanced'] end more than"
            " once, or go on after their end",
        ),
        ("versions", "the version served is not the last promoted or rolled back to"),
    ]
    # A promotion whose change is missing is lost; a clean agent has nothing to say.
    served = {"serving": "version-2"}
    lost = EvolutionView(AGENT, proposals[:1], {"ok": True}, history[:1], 0, [], served, "x")
    assert [(p.category, p.cause) for p in canary_problems(lost)] == [
        ("lost", "a change the history keeps lost")
    ]
    only = f"x\n{evolved_mark(promoted)}"
    clean = EvolutionView(
        AGENT, proposals[:1], {"ok": True}, history[:1], 0, rollouts[:1], served, only
    )
    assert canary_problems(clean) == []


def test_a_rollback_leaves_exactly_its_targets_changes() -> None:
    """Promoted twice, then rolled back to the first promotion's version: the second's
    change is gone, the first's stays; a rollback that left another's change is named."""
    first, second = token_for(3, 1), token_for(3, 2)
    proposals = [
        {"id": f"p-{i}", "status": "promoted", "rationale": f"chaos proposal {t}"}
        for i, t in enumerate((first, second))
    ]

    def spec(*tokens: str) -> dict[str, Any]:
        return {"blocks": {"persona": "x" + "".join(f"\n{evolved_mark(t)}" for t in tokens)}}

    back = {"version_id": "v-3", "spec": spec(first), "reason": "chaos rollback T003n000009"}
    history = [
        {"type": "VersionPromoted", "decision": {"version_id": "v-1", "proposal_id": "p-0"}},
        {"type": "VersionPromoted", "decision": {"version_id": "v-2", "proposal_id": "p-1"}},
        {"type": "VersionRolledBack", "decision": back},
    ]
    versions = {
        "serving": "v-3",
        "versions": [
            {"version_id": "v-1", "spec": spec(first)},
            {"version_id": "v-3", "spec": spec(first)},
        ],
    }
    persona = spec(first)["blocks"]["persona"]
    view = EvolutionView(AGENT, proposals, {"ok": True}, history, 0, [], versions, persona)
    assert canary_problems(view) == []
    assert rolled_back_by(view, "T003n000009") == [back]
    assert rollback_problems(view, [back], "v-1") == []
    # Served with the second's change still in it: a change taken back, still served.
    kept = EvolutionView(
        AGENT,
        proposals,
        {"ok": True},
        history,
        0,
        [],
        versions,
        spec(first, second)["blocks"]["persona"],
    )
    assert [p.cause for p in canary_problems(kept)] == [
        "a change taken back by a rollback still served",
        "a promotion's effects and its decision disagree",
    ]
    wrong = {**back, "spec": spec(first, second)}
    assert [p.cause for p in rollback_problems(view, [wrong], "v-1")] == [
        "a rollback did not take back exactly the decisions since its target"
    ]
