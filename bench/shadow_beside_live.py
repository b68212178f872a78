"""Does shadow work slow users? One-step message latency alone, and beside a 30-case
shadow evaluation, in paired rounds (issue 20 point 4).

One system (embedded NATS and Postgres, the five services, a zero-latency local model
in a process of its own). Agent S has 30 finished runs to replay; agent L answers
users. S's model (and the judge) is a second local model process at the lowest CPU
priority: it stands in for a remote provider, whose compute is not this machine's, so
the figures show what O's own processes cost live traffic (`--shared-model` puts S on
L's model process instead, which also makes L's model calls queue behind the shadow's).
Each round
measures L's one-step messages twice, in alternating order: once with nothing else
going on, once while S's proposal is evaluated in the shadow (30 cases: the echoing
model's judgements are ties, so all 30 run). The figures are medians and p99
per condition over all rounds; on this shared machine, judge a difference by the
spread between rounds, which is printed too.

    PYTHONPATH=contracts:services:. .venv/bin/python -m bench.shadow_beside_live --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx

from bench.local_system import free_port, local_system
from bench.shadow_cost import RULE, percentile
from bench.tables import table

SERVICES = ("gateway", "executor", "memory", "tool_sandbox", "evolution")
CASES = 30


async def new_agent(http: httpx.AsyncClient, model: str = "openai/gpt-4o-mini") -> str:
    made = await http.post(
        "/v1/agents/",
        json={
            "model": model,
            "embedding": "openai/text-embedding-3-small",
            "memory_blocks": [{"label": "human", "value": "Name: Sam"}],
        },
    )
    assert made.status_code == 200, made.text
    return str(made.json()["id"])


async def one_step(http: httpx.AsyncClient, agent_id: str, text: str) -> float:
    started = time.perf_counter()
    sent = await http.post(
        f"/v1/agents/{agent_id}/messages",
        json={"messages": [{"role": "user", "content": text}]},
    )
    assert sent.status_code == 200, sent.text
    return (time.perf_counter() - started) * 1000


async def alone(http: httpx.AsyncClient, agent_id: str, n: int) -> list[float]:
    return [await one_step(http, agent_id, f"alone {i}") for i in range(n)]


async def beside_shadow(
    http: httpx.AsyncClient, live: str, shadow: str, round_: int, n: int
) -> tuple[list[float], float]:
    """L's latencies while S's evaluation runs (at most n messages), and how long it took."""
    base = f"/v1/agents/{shadow}/evolution"
    patch = {"ops": [{"op": "append_text", "target": "system", "text": f"{RULE} ({round_})"}]}
    started = time.perf_counter()
    made = await http.post(f"{base}/proposals", json={"patch": patch})
    assert made.status_code == 201, made.text
    pid = made.json()["id"]
    times: list[float] = []
    status = "proposed"
    while status in ("proposed", "evaluating") and len(times) < n:
        times.append(await one_step(http, live, f"beside {round_} {len(times)}"))
        status = (await http.get(f"{base}/proposals/{pid}")).json()["status"]
    while status in ("proposed", "evaluating"):  # (let it finish before the next round)
        await asyncio.sleep(0.05)
        status = (await http.get(f"{base}/proposals/{pid}")).json()["status"]
    proposal: dict[str, Any] = (await http.get(f"{base}/proposals/{pid}")).json()
    assert len(proposal["cases"]) == CASES, proposal["report"]
    return times, time.perf_counter() - started


@contextlib.contextmanager
def model_process(nice: int = 0) -> Iterator[str]:
    """The local model in a process of its own: serving the shadow's calls must not take
    this process's time, which measures the live messages. (It echoes; its judge answers
    are ties, so every case of the evaluation runs.)"""
    port = free_port()
    model = (sys.executable, "-m", "tests.fakes.openai_server", "--port", str(port))
    proc = subprocess.Popen(
        ["nice", "-n", str(nice), *model],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(10)


async def main(rounds: int, per_round: int, shared_model: bool) -> None:
    with model_process() as base_url, model_process(nice=19) as remote_url:
        shadow_model = "openai/gpt-4o-mini"
        if not shared_model:
            os.environ["O_PROVIDER_REMOTE_BASE_URL"] = remote_url
            os.environ["O_PROVIDER_REMOTE_API_KEY"] = "sk-local"
            shadow_model = os.environ["O_EVOLUTION_JUDGE_MODEL"] = "remote/gpt-4o-mini"
        async with local_system(base_url, SERVICES) as system:
            http = system.http
            live, shadow = await new_agent(http), await new_agent(http, shadow_model)
            for n in range(CASES):
                await one_step(http, shadow, f"[case {n}] how are you?")
            config = {
                "enabled": True,
                "cases_per_evaluation": CASES,
                "max_votes_per_conversation": CASES,
                "min_seconds_between_proposals": 0,
            }
            assert (await http.put(f"/v1/agents/{shadow}/evolution/config", json=config)).is_success
            await alone(http, live, 20)  # (warm-up)
            quiet: list[list[float]] = []
            busy: list[list[float]] = []
            took: list[float] = []
            for r in range(rounds):
                # Alternate which condition goes first, so drift favours neither.
                if r % 2 == 0:
                    quiet.append(await alone(http, live, per_round))
                    times, seconds = await beside_shadow(http, live, shadow, r, per_round)
                else:
                    times, seconds = await beside_shadow(http, live, shadow, r, per_round)
                    quiet.append(await alone(http, live, per_round))
                busy.append(times)
                took.append(seconds)

    def row(label: str, per: list[list[float]]) -> tuple[str, ...]:
        every = [t for ts in per for t in ts]
        medians = [statistics.median(ts) for ts in per if ts]
        return (
            label,
            str(len(every)),
            f"{statistics.median(every):.1f}",
            f"{percentile(every, 0.99):.1f}",
            f"{min(medians):.1f}-{max(medians):.1f}",
        )

    where = "L's model process" if shared_model else "a remote stand-in"
    print(
        f"one-step message latency (ms), {rounds} paired rounds; beside: while a {CASES}-case"
        f" shadow evaluation runs (its model: {where})\n"
        f"  (each took {min(took):.1f}-{max(took):.1f} s)"
    )
    print(
        table(
            ("condition", "messages", "p50", "p99", "round medians"),
            [row("alone", quiet), row("beside shadow", busy)],
        )
    )
    # Paired by round (the two conditions ran back to back): the shadow's cost is the
    # difference of the medians; within noise when its spread straddles zero.
    pairs = zip(quiet, busy, strict=True)
    paired = sorted(statistics.median(b) - statistics.median(q) for q, b in pairs)
    print(
        f"  beside - alone, round medians paired: median {statistics.median(paired):+.1f} ms"
        f" (rounds {paired[0]:+.1f} to {paired[-1]:+.1f})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-round", type=int, default=60)
    parser.add_argument("--shared-model", action="store_true", help="S on L's model process")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.per_round, args.shared_model))
