"""Each service's resident memory, and the first archival insert after the system is healthy.

`python -m bench.footprint` (in `make bench`). Starts the services as `make run` does
(embedded NATS and Postgres, a zero-latency local model), then, as soon as the gateway
answers its health check: times the first archival insert (a fresh agent with the local
embedder; importance given, so no model call), then `--passages` inserts and as many
searches, and prints every service's RSS (VmRSS: what the issue's 150 MB target counts)
after start, after the first insert and after the load, and the inserts' and searches'
latency.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [
    str(Path(__file__).resolve().parents[1] / p) for p in ("contracts", "services", ".")
]

from bench.local_system import local_system  # noqa: E402
from bench.world import build  # noqa: E402
from bench.zero_latency_llm import ZeroLatencyLLM  # noqa: E402
from o_devtools.supervisor import DEFAULT_SERVICES  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def answer(body: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "ok"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(passages: int) -> None:
    llm = ZeroLatencyLLM(answer)
    llm.start()
    try:
        async with local_system(llm.base_url) as system:
            http, supervisor = system.http, system.supervisor
            healthy = time.perf_counter()

            def rss() -> dict[str, float]:
                return {s: sum(rss_mb(p) for p in supervisor.pids(s)) for s in DEFAULT_SERVICES}

            at_start = rss()
            agent = await http.post(
                "/v1/agents/",
                json={"model": "openai/gpt-4o-mini", "embedding": "local/all-MiniLM-L6-v2"},
            )
            agent_id = agent.json()["id"]
            t0 = time.perf_counter()
            first = await http.post(
                f"/v1/agents/{agent_id}/archival-memory",
                json={"text": "The staging deploy key is XK-4471.", "importance": 5},
            )
            first.raise_for_status()
            done = time.perf_counter()
            print(
                f"first archival insert after healthy: {1000 * (done - t0):.0f} ms"
                f" ({1000 * (done - healthy):.0f} ms after the health check, agent creation"
                " included)"
            )
            after_first = rss()
            texts = [m.text for seed in range(101, 111) for m in build(seed).memories]
            questions = [q.text for seed in range(101, 111) for q in build(seed).questions]
            inserts, searches = [], []
            for i in range(passages):
                t = time.perf_counter()
                r = await http.post(
                    f"/v1/agents/{agent_id}/archival-memory",
                    json={"text": texts[i % len(texts)], "importance": 5},
                )
                r.raise_for_status()
                inserts.append(1000 * (time.perf_counter() - t))
            for i in range(passages):
                t = time.perf_counter()
                r = await http.get(
                    f"/v1/agents/{agent_id}/archival-memory/search",
                    params={"query": questions[i % len(questions)]},
                )
                r.raise_for_status()
                searches.append(1000 * (time.perf_counter() - t))
            after_load = rss()
            for label, values in (("insert", inserts), ("search", searches)):
                print(
                    f"{label} (HTTP, local embedder)  n={len(values)}"
                    f"  p50 {statistics.median(values):6.1f} ms"
                    f"  p99 {percentile(values, 0.99):6.1f} ms"
                )
            print(f"\n{'RSS, MB':<14}{'at start':>10}{'1st insert':>12}{'after load':>12}")
            for s in DEFAULT_SERVICES:
                print(f"{s:<14}{at_start[s]:>10.0f}{after_first[s]:>12.0f}{after_load[s]:>12.0f}")
    finally:
        llm.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=200)
    asyncio.run(main(parser.parse_args().passages))
