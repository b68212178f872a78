"""What one case of a shadow evaluation costs (`make bench`): time and model calls per case.

Starts the gateway, executor, memory and evolution services on embedded NATS and Postgres
with the tests' scripted FakeOpenAI, sends CASES one-step messages to one agent, proposes
a patch to its system prompt and lets the evolution service evaluate it in the shadow.
The judge always answers "A" (a judge that favours whichever answer comes first), so
every case is a tie, the sequential test never stops early, and all CASES cases run.

Prints the time per case (from one recorded decision to the next: EvaluationStarted, each
CaseEvaluated, on the evolution log), median and p90, and how much of it the two arms'
replays took; and checks that each one-step case asked the model exactly four times, two
arm calls (parent, candidate) and two judge calls (both orders), none of them repeated.

    python -m bench.shadow_cost [--cases 30] [--history 0] [--each]

`--history N` has the agent make N runs before the cases' runs: reading a case's run and
the snapshot before it replay the agent's log, so a case costs more on a longer one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

from bench.footprint import status_mb  # noqa: E402
from bench.local_system import local_system  # noqa: E402
from bench.tables import table  # noqa: E402
from o_evolution.judge import RUBRIC  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, Reply  # noqa: E402

SERVICES = ("gateway", "executor", "memory", "evolution")
RULE = "Greet the user by name."
CASE = re.compile(r"\[case (\d+)\]")
# When each model call arrived (wall clock, as the log's decisions are stamped), by body.
ARRIVED: dict[int, float] = {}


def scripted(body: dict[str, Any]) -> Reply:
    """The judge prefers position A; the agent echoes, greeting when its prompt says so."""
    ARRIVED[id(body)] = time.time()
    system = str(body["messages"][0].get("content"))
    if system == RUBRIC:
        return Reply(content="A")
    answer = f"Noted: {body['messages'][-1].get('content')}"
    return Reply(content=f"Hello Sam! {answer}" if RULE in system else answer)


def call_kind(body: dict[str, Any]) -> tuple[int, str]:
    """Which case a shadow call served, and what it was: an arm or one judge ordering."""
    messages = body["messages"]
    if str(messages[0].get("content")) == RUBRIC:
        prompt = str(messages[-1]["content"])
        conversation, answers = prompt.split("\n\nAnswer A:\n", 1)
        match = CASE.search(conversation)
        first = "candidate" if answers.startswith("Hello Sam!") else "parent"
        kind = f"judge, {first} as A"
    else:
        match = CASE.search(str(messages[-1].get("content")))
        kind = "candidate arm" if RULE in str(messages[0].get("content")) else "parent arm"
    assert match is not None, f"a call that serves no case: {json.dumps(body)[:300]}"
    return int(match.group(1)), kind


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def check_calls(calls: list[dict[str, Any]], cases: int) -> None:
    """Exactly two arm calls and two judge calls per case, and no call asked twice."""
    kinds = Counter(call_kind(body) for body in calls)
    expected = ("parent arm", "candidate arm", "judge, parent as A", "judge, candidate as A")
    for n in range(cases):
        got = {k: kinds[(n, k)] for k in expected}
        assert got == dict.fromkeys(expected, 1), f"case {n}: {got}"
    assert len(calls) == 4 * cases, f"{len(calls)} calls for {cases} cases"
    distinct = {json.dumps(body, sort_keys=True) for body in calls}
    assert len(distinct) == len(calls), f"{len(calls) - len(distinct)} calls repeated"


PARTS = (
    "whole case",
    "  before the arms",
    "  the two arms",
    "  the two judge calls",
)


def per_case(
    calls: list[dict[str, Any]], history: list[dict[str, Any]], pid: str, cases: int
) -> list[list[float]]:
    """Milliseconds per case: whole (one decision to the next), then its three parts."""
    decided: dict[int, float] = {}
    for h in history:
        if h["decision"].get("proposal_id") != pid:
            continue
        at = datetime.fromisoformat(h["created_at"]).timestamp()
        if h["type"] == "EvaluationStarted":
            decided[-1] = at
        elif h["type"] == "CaseEvaluated":
            decided[h["decision"]["n"]] = at
    first: dict[tuple[int, str], float] = {}
    for body in calls:
        n, kind = call_kind(body)
        key = (n, "judge" if kind.startswith("judge") else "arm")
        first[key] = min(first.get(key, ARRIVED[id(body)]), ARRIVED[id(body)])
    parts: list[list[float]] = [[], [], [], []]
    for n in range(cases):
        start, arm, judge, end = decided[n - 1], first[(n, "arm")], first[(n, "judge")], decided[n]
        for i, ms in enumerate((end - start, arm - start, judge - arm, end - judge)):
            parts[i].append(ms * 1000)
    return parts


async def evaluated(
    http: Any, base: str, llm: FakeOpenAI, cases: int
) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """A proposal of RULE, evaluated: the proposal, its id and the model calls it made."""
    asked = len(llm.requests)
    patch = {"ops": [{"op": "append_text", "target": "system", "text": RULE}]}
    made = await http.post(f"{base}/proposals", json={"patch": patch})
    assert made.status_code == 201, made.text
    pid = made.json()["id"]
    deadline = time.monotonic() + 30 + 5 * cases
    while True:
        proposal: dict[str, Any] = (await http.get(f"{base}/proposals/{pid}")).json()
        if proposal["status"] not in ("proposed", "evaluating"):
            break
        assert time.monotonic() < deadline, f"still {proposal['status']}"
        await asyncio.sleep(0.2)
    return proposal, pid, llm.requests[asked:]


def reset_peak(pid: int) -> None:
    """The process's peak resident memory (VmHWM) set to what it has now (Linux)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


async def main(
    cases: int,
    history_runs: int = 0,
    each: bool = False,
    reset: bool = False,
    again: bool = False,
    restart: bool = False,
) -> None:
    llm = FakeOpenAI()
    llm.default_reply = scripted
    llm.start()
    try:
        async with local_system(llm.base_url, SERVICES) as system:
            http = system.http
            agent = (
                await http.post(
                    "/v1/agents/",
                    json={
                        "model": "openai/gpt-4o-mini",
                        "embedding": "openai/text-embedding-3-small",
                        "memory_blocks": [{"label": "human", "value": "Name: Sam"}],
                    },
                )
            ).json()
            base = f"/v1/agents/{agent['id']}/evolution"
            # Older runs first (never cases: the most recent `cases` runs are), then the cases.
            texts = [f"an older message, {i}" for i in range(history_runs)]
            texts += [f"[case {n}] how are you?" for n in range(cases)]
            for i, text in enumerate(texts):
                if reset and i == history_runs and history_runs:
                    # The older runs leave the context (as summaries make them leave a real
                    # agent's): the log is long, the context the cases' alone.
                    done = await http.patch(f"/v1/agents/{agent['id']}/reset-messages")
                    assert done.status_code == 200, done.text
                sent = await http.post(
                    f"/v1/agents/{agent['id']}/messages",
                    json={"messages": [{"role": "user", "content": text}]},
                )
                assert sent.status_code == 200, sent.text
            config = {
                "enabled": True,
                "cases_per_evaluation": cases,
                "max_votes_per_conversation": cases,
            }
            assert (await http.put(f"{base}/config", json=config)).status_code == 200
            # The evolution service's peak memory from here (Linux: 5 resets VmHWM).
            evolution = system.supervisor.pids("evolution")
            resident = sum(status_mb(p) for p in evolution)
            for pid in evolution:
                reset_peak(pid)
            proposal, pid, calls = await evaluated(http, base, llm, cases)
            peak = sum(status_mb(p, "VmHWM") for p in evolution)
            if restart:
                # Its next evaluation in a new process (killed: what a crash leaves).
                supervisor = system.supervisor
                restarts = supervisor.restart_count("evolution")
                for process in evolution:
                    os.kill(process, signal.SIGKILL)
                await supervisor.wait_for_restarts("evolution", restarts + len(evolution))
            # The same proposal again: the agent's next evaluation, of the same cases.
            second = await evaluated(http, base, llm, cases) if again else None
            history = (await http.get(f"{base}/history")).json()
    finally:
        llm.stop()

    assert len(proposal["cases"]) == cases, proposal["report"]["reason"]
    assert all(c["outcome"] == "tie" for c in proposal["cases"])
    check_calls(calls, cases)
    parts = per_case(calls, history, pid, cases)
    rows = [
        (label, f"{statistics.median(v):.1f}", f"{percentile(v, 0.9):.1f}", f"{min(v):.1f}",
         f"{max(v):.1f}")
        for label, v in zip(PARTS, parts, strict=True)
    ]  # fmt: skip
    if each:
        print(table(("case", *PARTS), [(n, *(f"{p[n]:.1f}" for p in parts)) for n in range(cases)]))
    print(
        f"shadow evaluation of {cases} one-step cases, the agent's last {cases} of"
        f" {cases + history_runs} runs\n  (the judge always answers 'A': every case a tie, so all"
        f" {cases} run)\n  {proposal['status']}: {proposal['report']['reason']}"
    )
    print(table(("ms per case", "median", "p90", "min", "max"), rows))
    print(
        "  model calls per case: 4 = 2 arm calls (parent, candidate) + 2 judge calls (both"
        f" orders),\n    checked for each case; {len(calls)} in all, none repeated"
    )
    print(f"  tokens per case: {proposal['tokens'] / cases:.0f} (the scripted model's count)")
    print(
        f"  the evolution service: {resident:.0f} MB resident before the proposal, at most"
        f" {peak:.0f} MB while it was evaluated (+{peak - resident:.0f})"
    )
    if second is not None:
        again_proposal, again_pid, again_calls = second
        assert len(again_proposal["cases"]) == cases, again_proposal["report"]["reason"]
        check_calls(again_calls, cases)
        before_arms = per_case(again_calls, history, again_pid, cases)[1]
        print(
            "  the same proposal again (the agent's next evaluation"
            + (", the evolution service restarted" if restart else "")
            + "): before the arms, first"
            f" case {before_arms[0]:.1f} ms (this one's: {parts[1][0]:.1f}), median"
            f" {statistics.median(before_arms):.1f}"
        )
    print(
        "  before the arms: from the previous decision to the case's first arm call (recording"
        "\n    that decision, the budget and backlog checks, reading the run, the snapshot);"
        "\n  the two arms: to the first judge call; the two judge calls: to the case's decision"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=30)
    parser.add_argument(
        "--history", type=int, default=0, help="runs the agent makes before the cases' runs"
    )
    parser.add_argument("--each", action="store_true", help="print every case's times too")
    parser.add_argument(
        "--reset",
        action="store_true",
        help="the older runs' messages leave the context before the cases' runs (reset-messages)",
    )
    parser.add_argument(
        "--again",
        action="store_true",
        help="then the same proposal again: the agent's next evaluation, of the same cases",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="with --again: the evolution service killed (and restarted) before the second",
    )
    args = parser.parse_args()
    asyncio.run(main(args.cases, args.history, args.each, args.reset, args.again, args.restart))
