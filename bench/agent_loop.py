"""Per-step orchestration overhead of the agent loop (`make bench`).

Starts embedded NATS and Postgres, the gateway, executor and memory services
(real processes under the Supervisor) and a zero-latency OpenAI-compatible
server in a process of its own (bench/zero_latency_llm.py), then times
POST /v1/agents/{id}/messages for 1-step runs (plain answer) and 3-step runs
(two tool calls, conversation_search then memory_insert, then the answer):
from the gateway receiving the request to its response (the gateway's
Server-Timing header), and as the HTTP client saw it. Prints the median and p99
over RUNS runs each, after WARMUP untimed runs, and the CPU each part of the
system spent per run (on a shared machine that moves less than wall time).

    python -m bench.agent_loop [--runs 200] [--warmup 20] [--tls [nats|postgres]]
                               [--postgres-bin DIR] [--no-nats-auth]

`--tls` runs NATS and Postgres with TLS (certificates made for the run; Postgres through its
TLS front, whose CPU is counted apart: o_devtools/pg_tls_front.py), `--tls nats` NATS alone,
`--tls postgres` Postgres alone, to measure what TLS costs against the same without it.
`--postgres-bin DIR` (or O_POSTGRES_BIN_DIR) runs the Postgres in DIR, built with SSL and
pgvector, on a loopback port instead of the embedded one, with its own TLS when `--tls` covers
Postgres (o_devtools/native_postgres.py): plain TCP against TLS on the same server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

from bench.local_system import local_system, postgres_bin_argument  # noqa: E402
from bench.zero_latency_llm import ZeroLatencyLLM  # noqa: E402

AGENTS = 20
# The evolution service follows every run's end (sleep-time turns): part of the loop's cost.
SERVICES = ("gateway", "executor", "memory", "evolution")


def scripted(body: dict[str, Any]) -> dict[str, Any]:
    """Zero latency. "3 steps" turns call two tools first; everything else answers at once."""
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    text = str(messages[last_user]["content"])
    if "3 steps" not in text:
        return {"role": "assistant", "content": f"echo: {text}"}
    done = sum(1 for m in messages[last_user:] if m["role"] == "tool")
    if done == 2:
        return {"role": "assistant", "content": "done"}
    name, arguments = (
        ("conversation_search", {"query": "nothing-matches"})
        if done == 0
        else ("memory_insert", {"label": "human", "new_string": "."})
    )
    call = {
        "id": f"call_{done}_{len(messages)}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU a live process has used (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def postgres_pids(postmaster: int) -> list[int]:
    """The embedded server's processes: the postmaster and its children (the backends)."""
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid == postmaster:
                    pids.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return pids


def cpu_by_part(parts: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds so far of each part's processes. Postgres' backends are looked up again each
    time from its postmaster (first of its list): a pool opens connections as it needs them,
    and a backend born after the list was made would go uncounted. (One that ends between two
    looks is still miscounted: pools keep theirs for minutes idle, so that is rare.)"""
    return {
        name: sum(cpu_seconds(p) for p in (postgres_pids(pids[0]) if name == "postgres" else pids))
        for name, pids in parts.items()
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def server_ms(response: httpx.Response) -> float:
    """The gateway's own time for the request (its Server-Timing header)."""
    timing = response.headers["server-timing"]
    return float(timing.split("dur=", 1)[1].split(";")[0])


async def measure(
    http: httpx.AsyncClient, agent_ids: list[str], text: str, runs: int
) -> tuple[list[float], list[float]]:
    """Client-side and gateway-side milliseconds of each run."""
    client, server = [], []
    for i in range(runs):
        agent_id = agent_ids[i % len(agent_ids)]
        start = time.perf_counter()
        response = await http.post(
            f"/v1/agents/{agent_id}/messages", json={"input": f"{text} #{i}"}
        )
        client.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, response.text
        assert response.json()["stop_reason"]["stop_reason"] == "end_turn"
        server.append(server_ms(response))
    return client, server


def summary(label: str, timings: list[float]) -> str:
    return (
        f"  {label:<18} median {statistics.median(timings):7.2f}"
        f"   p99 {percentile(timings, 0.99):7.2f}"
        f"   min {min(timings):6.2f}   max {max(timings):7.2f}"
    )


async def print_timeline(nats_url: str, agent_id: str) -> None:
    """Where the last run's time went: its events with the time since the run started."""
    from o_contracts import subjects
    from o_contracts.envelope import decode
    from o_runtime.eventlog import EventLog

    log = await EventLog.connect(nats_url, "bench")
    try:
        events = [decode(raw.data) async for raw in log.replay(subjects.agent_subject(agent_id))]
    finally:
        await log.close()
    last_run = [
        e
        for e in events
        if getattr(e.data, "run_id", None) == getattr(events[-1].data, "run_id", None)
    ]
    start = last_run[0].time
    print("last run's events (ms since RunStarted):")
    for e in last_run:
        print(f"  {(e.time - start).total_seconds() * 1000:8.2f}  {e.type}")


async def main(
    runs: int,
    warmup: int,
    timeline: bool = False,
    nats_auth: bool = True,
    tls: str | None = None,
    postgres_bin: Path | None = None,
) -> None:
    llm = ZeroLatencyLLM(scripted)
    llm.start()
    try:
        async with local_system(
            llm.base_url, SERVICES, nats_auth=nats_auth, tls=tls, postgres_bin=postgres_bin
        ) as system:
            http, supervisor, servers = system.http, system.supervisor, system.servers
            # Runs go round-robin over AGENTS agents, so each conversation stays
            # short: the figures are the loop's overhead, not the cost of ever
            # longer contexts (which summarization bounds in real use).
            agent_ids = []
            for _ in range(AGENTS):
                created = await http.post(
                    "/v1/agents/",
                    json={
                        "model": "openai/gpt-4o-mini",
                        "memory_blocks": [{"label": "human", "value": "bench"}],
                    },
                )
                agent_ids.append(created.json()["id"])
            agent_id = agent_ids[-1]
            print(
                f"{runs} timed runs each (after {warmup} warm-up) over {AGENTS} agents, ms;"
                " gateway: from the gateway receiving the POST to its response"
                " (Server-Timing), client: as the HTTP client saw it"
            )
            # CPU each part of the system spends per run: on a shared,
            # noisy machine this moves less than wall-clock time does.
            parts = {name: supervisor.pids(name) for name in SERVICES} | {
                "nats": [servers.nats.pid or 0],
                "postgres": postgres_pids(servers.postgres.pid or 0),
                "client": [os.getpid()],
                "llm": [llm.pid],
            }
            front = getattr(servers.postgres, "front", None)
            if front is not None:
                parts["pg-tls-front"] = [front.pid]
            print(f"NATS {servers.nats.url}, TLS: {tls or 'off'}")
            print(f"Postgres {servers.postgres.url} from {servers.postgres.bin_dir}")
            for label, text in (("1-step", "hello"), ("3-step", "3 steps")):
                await measure(http, agent_ids, text, warmup)
                before = cpu_by_part(parts)
                client, server = await measure(http, agent_ids, text, runs)
                after = cpu_by_part(parts)
                print(summary(f"{label} gateway:", server))
                print(summary(f"{label} client:", client))
                spent = {n: (after[n] - before[n]) * 1000 / runs for n in parts}
                print(
                    f"    CPU ms per run: total {sum(spent.values()):.1f} = "
                    + ", ".join(f"{n} {v:.1f}" for n, v in spent.items())
                )
            if timeline:
                await print_timeline(servers.nats.url, agent_id)
    finally:
        llm.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--timeline", action="store_true", help="print the last run's events")
    parser.add_argument(
        "--no-nats-auth",
        action="store_true",
        help="NATS without identities or permissions: only to measure what they cost",
    )
    parser.add_argument(
        "--tls",
        nargs="?",
        const="all",
        choices=["all", "nats", "postgres"],
        help="NATS and Postgres (or one of them) with TLS, certificates made for the run",
    )
    postgres_bin_argument(parser)
    args = parser.parse_args()
    asyncio.run(
        main(
            args.runs,
            args.warmup,
            args.timeline,
            not args.no_nats_auth,
            args.tls,
            args.postgres_bin,
        )
    )
