"""Hot reads under load: GET agent, list messages and get run with wrk, 32 connections.

`python -m bench.throughput` (in `make bench`). Starts the services as `make run` does
(embedded NATS and Postgres, a zero-latency local model), makes agents with blocks, a few
1-step runs each (so an agent has messages and runs), then runs `wrk --latency` against each
route (`--connections 32`, `--duration 10` s, `--repeats` times) and prints requests per
second, latency percentiles as wrk measured them (p50, p99), the CPU the gateway, Postgres
and wrk spent per request (figures less at the mercy of a shared machine's other tenants than
requests per second), how busy the machine was and how much of that was none of these (the
other tenants: the noise). Every response must be a 2xx: wrk's count of others fails the run.

`--baseline DIR` is a paired A/B: a second system runs the code of checkout DIR (main, say)
beside this one, and each repeat measures both, one route after the other, alternating
which goes first; medians per side are printed at the end.

wrk is Debian's package (`apt-get install -y wrk`); without it the benchmark says so and
exits 0 (skipped), so `make bench` still runs the others.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path[:0] = [
    str(Path(__file__).resolve().parents[1] / p) for p in ("contracts", "services", ".")
]

from bench.agent_loop import CLOCK_TICKS, cpu_seconds, postgres_pids  # noqa: E402
from bench.local_system import API_KEY, ROOT, LocalSystem, local_system  # noqa: E402
from bench.zero_latency_llm import ZeroLatencyLLM  # noqa: E402

ROUTES = ("agent", "messages", "run")
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}
# The services a 1-step run needs (the sandbox and evolution only add idle CPU).
SERVICES = ("gateway", "executor", "memory")


@dataclass
class Result:
    side: str
    route: str
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    gateway_cpu_ms: float  # per request
    postgres_cpu_ms: float  # per request
    wrk_cpu_ms: float  # per request: the load generator's own share
    machine_busy: float  # share of all cores busy during the run, anyone's work
    others: float  # cores' share busy with none of the above (other tenants: the noise)


def answer(body: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "noted"}


def latency_ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text.strip())
    if match is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match[1]) * UNITS[match[2]]


def parse_wrk(output: str) -> tuple[float, float, float, int, int]:
    """wrk --latency's requests/s, p50 and p99 (ms), requests, and non-2xx responses."""
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output)[1])  # type: ignore[index]
    p50 = latency_ms(re.search(r"^\s+50%\s+(\S+)", output, re.M)[1])  # type: ignore[index]
    p99 = latency_ms(re.search(r"^\s+99%\s+(\S+)", output, re.M)[1])  # type: ignore[index]
    requests = int(re.search(r"(\d+) requests in", output)[1])  # type: ignore[index]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(r"Socket errors:.*timeout (\d+)", output)
    return rps, p50, p99, requests, (int(bad[1]) if bad else 0) + (int(errors[1]) if errors else 0)


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) CPU jiffies of the whole machine, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def tree_pids(root: int) -> list[int]:
    """A process and its children (gateway worker processes, if any)."""
    return postgres_pids(root)


def reaped_cpu_seconds(pid: int) -> float:
    """CPU of the children `pid` has waited for (Postgres backends that ended: their time
    moves there from the live children's)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[13]) + int(fields[14])) / CLOCK_TICKS


@dataclass
class Target:
    side: str
    system: LocalSystem
    paths: dict[str, str]

    def cpu(self) -> tuple[float, float]:
        gateway = sum(
            cpu_seconds(p) for pid in self.system.supervisor.pids("gateway") for p in tree_pids(pid)
        )
        postmaster = self.system.servers.postgres.pid
        pg = 0.0
        if postmaster:
            pg = reaped_cpu_seconds(postmaster) + sum(
                cpu_seconds(p) for p in postgres_pids(postmaster)
            )
        return gateway, pg


async def prepare(system: LocalSystem, agents: int, runs: int) -> dict[str, str]:
    """Agents with blocks and a few 1-step runs each; the paths wrk reads (the first agent's)."""
    http = system.http
    agent_ids = []
    for i in range(agents):
        created = await http.post(
            "/v1/agents/",
            json={
                "name": f"bench-{i}",
                "model": "openai/gpt-4o-mini",
                "memory_blocks": [
                    {"label": "human", "value": "Name: Sam. Likes tea and long walks."},
                    {"label": "persona", "value": "A helpful assistant that keeps notes."},
                ],
                "tags": ["bench"],
            },
        )
        created.raise_for_status()
        agent_ids.append(created.json()["id"])
    run_id = ""
    for agent_id in agent_ids:
        for j in range(runs):
            reply = await http.post(
                f"/v1/agents/{agent_id}/messages",
                json={"messages": [{"role": "user", "content": f"note {j}: I like tea"}]},
            )
            reply.raise_for_status()
            run_id = run_id or reply.json()["messages"][-1]["run_id"]
    first = agent_ids[0]
    paths = {
        "agent": f"/v1/agents/{first}",
        "messages": f"/v1/agents/{first}/messages",
        "run": f"/v1/runs/{run_id}",
    }
    for path in paths.values():
        (await http.get(path)).raise_for_status()
    return paths


def wrk(url: str, threads: int, connections: int, duration: int) -> str:
    done = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{duration}s",
            "--latency",
            "-H",
            f"Authorization: Bearer {API_KEY}",
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def measure(target: Target, route: str, args: argparse.Namespace) -> Result:
    url = target.system.base_url + target.paths[route]
    # A second's warm-up: connections opened, caches (Postgres', the gateway's) filled.
    wrk(url, args.threads, args.connections, 1)
    gateway0, pg0 = target.cpu()
    busy0, total0 = busy_jiffies()
    wrk0 = children_cpu()
    output = wrk(url, args.threads, args.connections, args.duration)
    wrk1 = children_cpu()
    busy1, total1 = busy_jiffies()
    gateway1, pg1 = target.cpu()
    rps, p50, p99, requests, bad = parse_wrk(output)
    if bad:
        raise SystemExit(f"{target.side} {route}: {bad} responses were not 2xx\n{output}")
    # (jiffies of all cores; CPU seconds of ours over the same wall time)
    total = max(1, total1 - total0)
    ours = (gateway1 - gateway0) + (pg1 - pg0) + (wrk1 - wrk0)
    wall_cpu = total / CLOCK_TICKS
    return Result(
        target.side,
        route,
        rps,
        p50,
        p99,
        requests,
        1000 * (gateway1 - gateway0) / requests,
        1000 * (pg1 - pg0) / requests,
        1000 * (wrk1 - wrk0) / requests,
        (busy1 - busy0) / total,
        max(0.0, (busy1 - busy0) / total - ours / wall_cpu),
    )


def children_cpu() -> float:
    """CPU of this process's children that have ended (wrk, once it is waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def line(r: Result) -> str:
    return (
        f"  {r.side:<9} {r.route:<9} {r.rps:8.0f} req/s   p50 {r.p50_ms:6.2f} ms"
        f"   p99 {r.p99_ms:6.2f} ms   CPU ms/req: gateway {r.gateway_cpu_ms:.3f}"
        f" postgres {r.postgres_cpu_ms:.3f} wrk {r.wrk_cpu_ms:.3f}"
        f"   busy {100 * r.machine_busy:3.0f}% (others {100 * r.others:2.0f}%)"
    )


def medians(results: list[Result], sides: list[str]) -> None:
    print("\nmedians")
    for route in ROUTES:
        for side in sides:
            rs = [r for r in results if r.route == route and r.side == side]
            if not rs:
                continue
            print(
                line(
                    Result(
                        side,
                        route,
                        statistics.median(r.rps for r in rs),
                        statistics.median(r.p50_ms for r in rs),
                        statistics.median(r.p99_ms for r in rs),
                        sum(r.requests for r in rs),
                        statistics.median(r.gateway_cpu_ms for r in rs),
                        statistics.median(r.postgres_cpu_ms for r in rs),
                        statistics.median(r.wrk_cpu_ms for r in rs),
                        statistics.median(r.machine_busy for r in rs),
                        statistics.median(r.others for r in rs),
                    )
                )
                + f"   ({len(rs)} runs)"
            )


@contextlib.asynccontextmanager
async def started(
    side: str, code_root: Path, llm: ZeroLatencyLLM, args: argparse.Namespace
) -> AsyncIterator[Target]:
    env = dict(kv.split("=", 1) for kv in args.env)
    async with local_system(
        llm.base_url,
        SERVICES,
        code_root=code_root,
        service_env=env,
        replicas={"gateway": args.gateway_replicas},
    ) as system:
        paths = await prepare(system, args.agents, args.runs)
        yield Target(side, system, paths)


async def main(args: argparse.Namespace) -> None:
    llm = ZeroLatencyLLM(answer)
    llm.start()
    try:
        async with contextlib.AsyncExitStack() as stack:
            targets = [await stack.enter_async_context(started("this", ROOT, llm, args))]
            if args.baseline:
                targets.insert(
                    0,
                    await stack.enter_async_context(started("baseline", args.baseline, llm, args)),
                )
            results = []
            print(
                f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s, "
                f"{args.repeats} repeats, routes {', '.join(args.routes)}"
            )
            for repeat in range(args.repeats):
                order = targets if repeat % 2 == 0 else targets[::-1]
                for route in args.routes:
                    for target in order:
                        result = await asyncio.to_thread(measure, target, route, args)
                        results.append(result)
                        print(line(result), flush=True)
            medians(results, [t.side for t in targets])
    finally:
        llm.stop()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--threads", type=int, default=2, help="wrk's threads")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--agents", type=int, default=3)
    p.add_argument("--runs", type=int, default=3, help="1-step runs per agent before reading")
    p.add_argument("--routes", nargs="+", choices=ROUTES, default=list(ROUTES))
    p.add_argument("--baseline", help="a checkout whose code runs as the A side (paired A/B)")
    p.add_argument(
        "--gateway-replicas",
        type=int,
        default=1,
        help="gateway processes sharing the port (O_GATEWAY_REPLICAS under make run)",
    )
    p.add_argument(
        "--env", action="append", default=[], help="KEY=VALUE for the services (repeatable)"
    )
    return p


if __name__ == "__main__":
    arguments = parser().parse_args()
    if arguments.baseline:
        arguments.baseline = Path(arguments.baseline).resolve()
    if shutil.which("wrk") is None:
        print("bench.throughput skipped: wrk is not installed (apt-get install -y wrk)")
        sys.exit(0)
    os.environ.setdefault("O_LOG_LEVEL", "WARNING")
    started_at = time.perf_counter()
    asyncio.run(main(arguments))
    print(f"took {time.perf_counter() - started_at:.0f} s")
