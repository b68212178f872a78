"""How fast projections are rebuilt from the log: what a restore, a `make rebuild` and a
`projections verify` take for a log of a given size.

A whole system (bench/local_system.py) on the zero-latency LLM is given a log: AGENTS agents,
each sent MESSAGES messages, every fifth followed by an archival insert. Then the rebuild
(`python -m o_devtools.rebuild`, every projection, as an operator runs it) is timed again and
again, as a process of its own; with `--against DIR`, DIR's rebuild alternates with this
checkout's on the same log, so the machine's swings touch both alike (paired rounds). Printed:
each round's seconds, their median and maximum, and events applied per second
(the events each projection replayed, summed over projections, over the median).

    python -m bench.rebuild_speed [--agents 16] [--messages 150] [--rounds 6] [--against DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

from bench.agent_loop import scripted  # noqa: E402
from bench.local_system import LocalSystem, local_system  # noqa: E402
from bench.zero_latency_llm import ZeroLatencyLLM  # noqa: E402

# Load sent at once: enough to keep the system busy, few enough not to queue long behind one agent.
PARALLEL_AGENTS = 16


async def make_log(system: LocalSystem, agents: int, messages: int) -> None:
    http = system.http
    gate = asyncio.Semaphore(PARALLEL_AGENTS)

    async def one_agent(i: int) -> None:
        async with gate:
            created = await http.post(
                "/v1/agents/",
                json={
                    "name": f"rebuild-{i}",
                    "model": "openai/gpt-4o-mini",
                    "memory_blocks": [
                        {"label": "human", "value": "Name: Sam"},
                        {"label": "persona", "value": "helpful"},
                    ],
                },
            )
            created.raise_for_status()
            agent_id = created.json()["id"]
            for k in range(messages):
                sent = await http.post(
                    f"/v1/agents/{agent_id}/messages",
                    json={"messages": [{"role": "user", "content": f"hello {k}"}]},
                )
                sent.raise_for_status()
                if k % 5 == 0:
                    stored = await http.post(
                        f"/v1/agents/{agent_id}/archival-memory",
                        json={"text": f"fact {k} of agent {i}"},
                    )
                    stored.raise_for_status()

    await asyncio.gather(*(one_agent(i) for i in range(agents)))


async def timed_rebuild(code_root: Path, system: LocalSystem) -> tuple[float, int]:
    """Seconds for `python -m o_devtools.rebuild` from `code_root`; events it replayed."""
    servers = system.servers
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(code_root / p) for p in ("contracts", "services", ".")),
        "NATS_URL": servers.nats.url,
        "DATABASE_URL": servers.postgres.url,
    }
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "o_devtools.rebuild",
        env=env,
        cwd=code_root,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"rebuild from {code_root} failed: {err.decode()[-2000:]}")
    # "<name>: replayed N events[; skipped ...]"
    replayed = sum(
        int(line.split()[2]) for line in out.decode().splitlines() if " replayed " in line
    )
    return seconds, replayed


def summary(label: str, seconds: list[float], replayed: int) -> str:
    median = statistics.median(seconds)
    rounds = ", ".join(f"{s:.2f}" for s in seconds)
    return (
        f"  {label:<8} median {median:6.2f} s, max {max(seconds):6.2f} s ({rounds});"
        f" {replayed / median:,.0f} events applied a second"
    )


async def main(agents: int, messages: int, rounds: int, against: Path | None) -> None:
    with ZeroLatencyLLM(scripted) as llm:
        async with local_system(llm.base_url) as system:
            started = time.perf_counter()
            await make_log(system, agents, messages)
            print(
                f"log made in {time.perf_counter() - started:.0f} s"
                f" ({agents} agents x {messages} messages)"
            )
            sides = {"this": ROOT} | ({"against": against} if against else {})
            times: dict[str, list[float]] = {k: [] for k in sides}
            replayed = 0
            for round_ in range(rounds):
                # (Alternating which goes first, so neither always follows the other.)
                order = list(sides.items())
                if round_ % 2:
                    order.reverse()
                for label, code_root in order:
                    seconds, replayed = await timed_rebuild(code_root, system)
                    times[label].append(seconds)
            print(
                f"rebuild of every projection, {replayed} events applied (summed), {rounds} rounds:"
            )
            for label, seconds in times.items():
                print(summary(label, seconds, replayed))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--messages", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--against", type=Path, help="another checkout's rebuild, alternated")
    args = parser.parse_args()
    against = args.against.resolve() if args.against else None
    asyncio.run(main(args.agents, args.messages, args.rounds, against))
