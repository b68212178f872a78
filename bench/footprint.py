"""Each service's resident memory, and the first archival insert after the system is healthy.

`python -m bench.footprint` (in `make bench`). Starts the services as `make run` does
(embedded NATS and Postgres, a zero-latency local model), then, as soon as the gateway
answers its health check: times the first archival insert (a fresh agent with the local
embedder; importance given, so no model call), then `--passages` inserts and as many
searches, and prints every service's RSS (VmRSS: what the issue's 150 MB target counts)
after start, after the first insert and after the load, and the inserts' and searches'
latency. RSS is anonymous memory (the heap, Python's objects) plus file-backed pages (the
interpreter's and extensions' code, the embedder's mapped weights: clean page-cache pages,
shared with any other process mapping the same file); the second table splits the figure
after the load into those two, and `--mappings N` lists each service's N largest mappings
(from /proc/PID/smaps) to show where the memory is.
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


def status_mb(pid: int, field: str = "VmRSS") -> float:
    """A /proc/PID/status figure in MB (VmRSS = RssAnon + RssFile + RssShmem)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rss_mb(pid: int) -> float:
    return status_mb(pid)


def largest_mappings(pid: int, count: int) -> list[tuple[float, float, str]]:
    """The process's `count` largest mappings by resident size: (Rss MB, Anonymous MB, name),
    the anonymous ones (heap, arenas, numpy's buffers) summed under "[anon]"."""
    sizes: dict[str, list[float]] = {}
    name = ""
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            name = head[5].strip() if len(head) == 6 else "[anon]"
            sizes.setdefault(name, [0.0, 0.0])
        elif head[0] == "Rss:":
            sizes[name][0] += int(head[1]) / 1024
        elif head[0] == "Anonymous:":
            sizes[name][1] += int(head[1]) / 1024
    ranked = sorted(((rss, anon, n) for n, (rss, anon) in sizes.items()), reverse=True)
    return ranked[:count]


def answer(body: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "ok"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(passages: int, mappings: int) -> None:
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
            print(f"\n{'after load, MB':<14}{'RSS':>10}{'anon':>12}{'file':>12}")
            for s in DEFAULT_SERVICES:
                pids = supervisor.pids(s)
                anon = sum(status_mb(p, "RssAnon") for p in pids)
                file = sum(status_mb(p, "RssFile") + status_mb(p, "RssShmem") for p in pids)
                print(f"{s:<14}{sum(rss_mb(p) for p in pids):>10.1f}{anon:>12.1f}{file:>12.1f}")
            for s in DEFAULT_SERVICES if mappings else ():
                for pid in supervisor.pids(s):
                    print(f"\n{s} (pid {pid}), largest mappings: RSS MB, of which anonymous")
                    for size, anon, name in largest_mappings(pid, mappings):
                        print(f"  {size:7.1f} {anon:7.1f}  {name}")
    finally:
        llm.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=200)
    parser.add_argument(
        "--mappings", type=int, default=0, help="list each service's N largest mappings"
    )
    args = parser.parse_args()
    asyncio.run(main(args.passages, args.mappings))
