"""`make demo-evolution`: one agent evolves: a proposal, a canary, a promotion, a rollback.

The whole system runs on embedded NATS and Postgres (a temporary folder) with the five
services under the Supervisor, as `make run` starts them, and a scripted local model in
place of OpenAI (the tests' FakeOpenAI): the agent answers a few questions; with the rule
RULE in its system prompt it greets the user by name first; the judge (whose system prompt
is o_evolution.judge.RUBRIC) prefers the answer that greets. Everything else is real: the
demo only calls the HTTP API, and prints what it gets back as plain tables.

    python -m bench.demo_evolution
"""

from __future__ import annotations

import asyncio
import itertools
import re
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

from bench.local_system import local_system  # noqa: E402
from bench.tables import short, table  # noqa: E402
from o_contracts.experiments import GateSettings  # noqa: E402
from o_evolution.gate import Sprt  # noqa: E402
from o_evolution.judge import RUBRIC  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, Reply  # noqa: E402

RULE = "Greet the user by name at the start of every answer."
ANSWERS = {
    "What is the capital of Portugal?": "Lisbon.",
    "How many days does a leap year have?": "366.",
    "What is 12 times 12?": "144.",
    "Which planet is closest to the sun?": "Mercury.",
    "Who wrote Pride and Prejudice?": "Jane Austen, in 1813.",
    "How many continents are there?": "Seven, by the usual count.",
    "What gas do plants take in?": "Carbon dioxide.",
    "What is the largest ocean?": "The Pacific.",
    "How many legs does a spider have?": "Eight.",
    "What is the square root of 81?": "9.",
    "What language is spoken in Brazil?": "Portuguese.",
    "At what temperature does water boil?": "100 degrees Celsius at sea level.",
}
QUESTIONS = list(ANSWERS)
# Seconds the demo waits for something the system does by itself before giving up.
DEADLINE = 120.0


def scripted(body: dict[str, Any]) -> Reply:
    """The local model. The judge compares two answers; the agent answers the question."""
    system = str(body["messages"][0].get("content"))
    if system == RUBRIC:
        prompt = str(body["messages"][-1]["content"])
        a = prompt.split("Answer A:\n", 1)[1].split("\n\nAnswer B:", 1)[0]
        b = prompt.split("\n\nAnswer B:\n", 1)[1].split("\n\nWhich answer", 1)[0]
        greets_a, greets_b = a.startswith("Hello "), b.startswith("Hello ")
        return Reply(content="A" if greets_a > greets_b else "B" if greets_b > greets_a else "tie")
    question = str(body["messages"][-1].get("content"))
    answer = ANSWERS.get(question.split(" (")[0], "I do not know that one, sorry.")
    if RULE in system:
        name = re.search(r"Name: (\w+)", system)
        answer = f"Hello {name.group(1) if name else 'there'}! {answer}"
    return Reply(content=answer)


def heading(title: str, explanation: str = "") -> None:
    print(f"\n== {title} ==")
    if explanation:
        print(explanation)


T = TypeVar("T")


async def until(what: str, check: Callable[[], Awaitable[T | None]]) -> T:
    """Poll `check` until it returns something, for at most DEADLINE seconds."""
    deadline = time.monotonic() + DEADLINE
    while True:
        found = await check()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up after {DEADLINE:g} s waiting for {what}")
        await asyncio.sleep(0.2)


def ok(response: httpx.Response) -> Any:
    if response.status_code >= 300:
        raise SystemExit(f"{response.request.method} {response.request.url}: {response.text}")
    return response.json()


class Demo:
    def __init__(self, http: httpx.AsyncClient, agent_id: str) -> None:
        self.http = http
        self.agent_id = agent_id
        self.base = f"/v1/agents/{agent_id}/evolution"
        self.sent = 0

    async def say(self, text: str) -> str:
        """Send a user message; the agent's answer."""
        body = ok(
            await self.http.post(
                f"/v1/agents/{self.agent_id}/messages",
                json={"messages": [{"role": "user", "content": text}]},
            )
        )
        self.sent += 1
        said = [m for m in body["messages"] if m["message_type"] == "assistant_message"]
        return str(said[-1]["content"])

    async def proposal(self, proposal_id: str) -> dict[str, Any]:
        got: dict[str, Any] = ok(await self.http.get(f"{self.base}/proposals/{proposal_id}"))
        return got

    async def proposal_in(self, proposal_id: str, *statuses: str) -> dict[str, Any] | None:
        proposal = await self.proposal(proposal_id)
        return proposal if proposal["status"] in statuses else None

    async def rollout(self) -> dict[str, Any] | None:
        rollouts = ok(await self.http.get(f"{self.base}/rollouts"))
        return rollouts[-1] if rollouts else None


def print_experiment(proposal: dict[str, Any]) -> None:
    report = proposal["report"]
    heading(
        "The experiment",
        "Each case is one of the agent's recorded runs, replayed twice in the shadow: once by\n"
        "the parent (the agent as it is) and once by the candidate. The judge sees both answers\n"
        "twice, in both orders (A is the parent's in the first ordering, the candidate's in the\n"
        "second); the candidate wins only if it is preferred both times.",
    )
    rows = []
    for case in proposal["cases"]:
        first, second = case["judged_parent_first"], case["judged_candidate_first"]
        rows.append(
            (
                case["n"],
                case["outcome"],
                short(case["parent"]["answer"], 24),
                short(case["candidate"]["answer"], 30),
                f"{first} ({ {'A': 'parent', 'B': 'candidate'}.get(first, 'tie') })",
                f"{second} ({ {'A': 'candidate', 'B': 'parent'}.get(second, 'tie') })",
                case["veto"] or "-",
            )
        )
    print(
        table(
            (
                "case",
                "outcome",
                "parent answered",
                "candidate answered",
                "judge, parent as A",
                "judge, candidate as A",
                "veto",
            ),
            rows,
        )
    )
    sprt = Sprt(GateSettings())
    print(
        "\nThe sequential test (Wald's SPRT) after each decisive case: the log-likelihood ratio of"
        f"\n'the candidate wins 70 % of cases' over '50 %'; accept at >= {sprt.upper:.2f},"
        f" reject at <= {sprt.lower:.2f}."
    )
    print(
        table(
            ("step", "wins", "losses", "llr"),
            [(s["n"], s["wins"], s["losses"], f"{s['llr']:.2f}") for s in report["sprt"]],
        )
    )
    print("\nSlices: a candidate better on average must not be clearly worse on any slice.")
    print(
        table(
            ("slice", "cases", "wins", "losses", "ties", "p (sign test)", "regressed"),
            [
                (
                    s["name"],
                    s["cases"],
                    s["wins"],
                    s["losses"],
                    s["ties"],
                    "-" if s["p_value"] is None else f"{s['p_value']:.4f}",
                    "yes" if s["regressed"] else "no",
                )
                for s in report["slices"]
            ],
        )
    )
    cost, latency = report["cost_ratio"], report["latency_ratio"]
    print(
        "\nCost and time, bounding a candidate the test accepts:"
        f"\n  tokens: {'-' if cost is None else f'{cost:.2f}x'} the parent's (at most 1.5x);"
        + (
            f" time per case: {latency:.2f}x the parent's (at most 2x)"
            if latency is not None
            else " time per case: within 50 ms of the parent's (no ratio)"
        )
        + f"\n  the evaluation itself spent {proposal['tokens']} tokens"
    )
    print(f"Decision: {proposal['status']}: {report['reason']}")


async def at_work(demo: Demo) -> None:
    heading("1. The agent at work", "A user (Sam) asks a few questions; every run is recorded.")
    rows = [(i, q, await demo.say(q)) for i, q in enumerate(QUESTIONS[:10])]
    print(table(("run", "Sam asked", "the agent answered"), rows))


async def configure(demo: Demo) -> None:
    heading(
        "2. Evolution configured",
        "Mode canary: an accepted proposal, once a person approves it, takes a growing share\n"
        "of live traffic, and is promoted at 100 % if its runs stay healthy.",
    )
    config = {
        "enabled": True,
        "mode": "canary",
        "canary_steps": [25, 50, 100],
        "analysis_every": 3,
        "cases_per_evaluation": 10,
        "max_votes_per_conversation": 10,
    }
    got = ok(await demo.http.put(f"{demo.base}/config", json=config))
    keys = ["mode", "canary_steps", "analysis_every", "approval_before_canary"]
    keys += ["cases_per_evaluation", "tokens_per_day"]
    print(table(("setting", "value"), [(k, got[k]) for k in keys]))


async def propose(demo: Demo) -> str:
    heading("3. A proposal", "An operator proposes a patch: a rule appended to the system prompt.")
    patch = {
        "ops": [{"op": "append_text", "target": "system", "text": RULE}],
        "rationale": "users like to be greeted by name",
    }
    made = ok(await demo.http.post(f"{demo.base}/proposals", json={"patch": patch}))
    print(f"  proposal {made['id']} ({made['status']}), diff of the system prompt:")
    for line in made["diff"][0]["unified"].splitlines():
        print(f"    {line if len(line) <= 96 else line[:93] + '...'}")
    return str(made["id"])


async def evaluated(demo: Demo, pid: str) -> dict[str, Any]:
    heading("4. Shadow evaluation", "It starts by itself; the demo polls the proposal's status.")
    started = time.monotonic()
    proposal = await until(
        "the shadow evaluation", lambda: demo.proposal_in(pid, "accepted", "rejected")
    )
    print(f"  {proposal['status']} after {time.monotonic() - started:.1f} s")
    print_experiment(proposal)
    if proposal["status"] != "accepted":
        raise SystemExit("the candidate was not accepted: nothing more to show")
    return proposal


async def approve(demo: Demo, pid: str) -> None:
    heading("5. Approval", "A person approves; in mode canary the canary then starts by itself.")
    approved = ok(
        await demo.http.post(f"{demo.base}/proposals/{pid}/approve", json={"note": "greetings: ok"})
    )
    print(f"  proposal {approved['status']}")

    async def running() -> dict[str, Any] | None:
        rollout = await demo.rollout()
        return rollout if rollout is not None and rollout["status"] == "running" else None

    rollout = await until("the canary to start", running)
    print(f"  canary {rollout['rollout_id']} started at {rollout['weight']:g} % of traffic")


async def canary(demo: Demo, pid: str) -> None:
    heading(
        "6. Canary",
        "Live messages: each run takes the candidate's arm (it greets) or the stable agent's,\n"
        "by a hash of the run below the weight. Every 3 candidate runs the arms are compared\n"
        "and, if the candidate is healthy, the weight goes up a step.",
    )
    rows = []
    for i in range(60):
        answer = await demo.say(f"{QUESTIONS[i % len(QUESTIONS)]} (live {i})")
        now = await demo.rollout()
        assert now is not None
        arm = "candidate" if answer.startswith("Hello ") else "stable"
        rows.append((i, arm, short(answer, 36), f"{now['weight']:g}%", now["status"]))
        if now["status"] != "running":
            break
    print(table(("live", "arm", "answer", "weight after", "canary"), rows))
    # (A stable answer after the weight already stood at 100 % before the message.)
    if any(r[1] == "stable" and before[3] == "100%" for before, r in itertools.pairwise(rows)):
        print(
            "  (A run that starts after the canary completes and before the promotion takes\n"
            "  effect is served by the stable agent: neither a canary nor the new version yet.)"
        )
    promoted = await until("the promotion", lambda: demo.proposal_in(pid, "promoted", "aborted"))
    if promoted["status"] != "promoted":
        raise SystemExit(f"the canary was aborted: {promoted['reason']}")
    rollout = await demo.rollout()
    assert rollout is not None
    print("\n  The canary's decisions (each arm's finished runs at the step analysed):")
    decisions = [
        (
            d["type"],
            "-" if d["weight"] is None else f"{d['weight']:g}%",
            _arm(d["candidate"]),
            _arm(d["stable"]),
            d["reason"] or "-",
        )
        for d in rollout["decisions"]
    ]
    headers = ("decision", "weight", "candidate runs/failed", "stable runs/failed", "reason")
    print(table(headers, decisions, indent=4))
    print(f"  proposal {promoted['status']}")


async def promoted_then_rolled_back(demo: Demo, proposal: dict[str, Any]) -> None:
    heading("7. The new behaviour", "The promoted version serves every conversation.")
    agent = ok(await demo.http.get(f"/v1/agents/{demo.agent_id}"))
    print(f"  system prompt ends with: {agent['system'].splitlines()[-1]!r}")
    question = "What is the capital of Portugal?"
    print(f"  Sam: {question}\n  agent: {await demo.say(question)}")

    heading("8. Rollback", "An operator goes back to the previous version, saying why.")
    reason = "the greeting is too chatty for our support queue"
    back = {"version_id": proposal["parent_version"], "reason": reason}
    ok(await demo.http.post(f"{demo.base}/rollback", json=back))
    versions = ok(await demo.http.get(f"{demo.base}/versions"))
    print(f"  serving {vid(versions['serving'])} (the parent) again; reason: {reason}")
    print(f"  Sam: {question}\n  agent: {await demo.say(question)}")


async def show_history(demo: Demo) -> None:
    heading(
        "9. History",
        "Every decision, hash-chained: each one's prev_hash is the hash of the one before.",
    )
    history = ok(await demo.http.get(f"{demo.base}/history"))
    rows = [
        (
            h["seq"],
            h["type"],
            (h["prev_hash"] or "(none)")[:12],
            h["hash"][:12],
            "yes" if i == 0 or h["prev_hash"] == history[i - 1]["hash"] else "NO",
            short(_about(h["type"], h["decision"]), 60),
        )
        for i, h in enumerate(history)
    ]
    print(table(("seq", "decision", "prev_hash", "hash", "linked", "about"), rows))
    verified = ok(await demo.http.get(f"{demo.base}/verify"))
    print(f"\n  GET .../verify (reads the log itself): {verified}")


async def walk(demo: Demo) -> None:
    await at_work(demo)
    await configure(demo)
    pid = await propose(demo)
    proposal = await evaluated(demo, pid)
    await approve(demo, pid)
    await canary(demo, pid)
    await promoted_then_rolled_back(demo, proposal)
    await show_history(demo)


def vid(version_id: str) -> str:
    """A version id shortened for a table: "version-" and its first 12 hex digits."""
    return version_id[:20]


def _arm(stats: dict[str, Any] | None) -> str:
    return "-" if not stats else f"{stats['runs']}/{stats['errors']}"


def _about(kind: str, d: dict[str, Any]) -> str:
    """A few words on one decision, for the history table."""
    if kind == "EvolutionConfigured":
        return f"mode {d['config']['mode']}"
    if kind == "ChangeProposed":
        return f"by {d['source']}: {vid(d['parent_version'])} -> {vid(d['candidate_version'])}"
    if kind == "CaseEvaluated":
        return f"case {d['n']}: {d['case']['outcome']}"
    if kind == "CandidateEvaluated":
        return f"{d['report']['decision']}: {d['report']['reason']}"
    if kind in ("RolloutStarted", "RolloutAdvanced"):
        return f"weight {d['weight']:g} %"
    if kind == "VersionPromoted":
        return f"serving {vid(d['version_id'])}"
    if kind == "VersionRolledBack":
        return f"serving {vid(d['version_id'])}: {d['reason']}"
    return str(d.get("reason") or d.get("note") or "")


async def main() -> None:
    llm = FakeOpenAI()
    llm.default_reply = scripted
    llm.start()
    try:
        print("Starting embedded NATS and Postgres, the five services and a scripted model...")
        async with local_system(llm.base_url) as system:
            print(f"  gateway at {system.base_url}")
            agent = ok(
                await system.http.post(
                    "/v1/agents/",
                    json={
                        "name": "demo-evolution",
                        "model": "openai/gpt-4o-mini",
                        "embedding": "openai/text-embedding-3-small",
                        "memory_blocks": [
                            {"label": "human", "value": "Name: Sam"},
                            {"label": "persona", "value": "A concise assistant."},
                        ],
                    },
                )
            )
            print(f"  agent {agent['id']}")
            await walk(Demo(system.http, agent["id"]))
            print(f"\nThe local model was asked {len(llm.requests)} times in all. Done.")
    finally:
        llm.stop()


if __name__ == "__main__":
    asyncio.run(main())
