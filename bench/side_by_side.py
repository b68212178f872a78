"""Two systems side by side, their runs alternated: an A/B that the machine's swings cannot tilt.

Running one configuration after the other (two bench/agent_loop.py runs) compares two
stretches of time on a shared machine whose speed swings by ±30 % from minute to minute,
more than the differences sought here. Both systems run at once instead, and the client
alternates: one run on one, then one on the other, the order flipped every pair. A swing
touches both sides of a pair alike, and the paired differences say what the configuration
costs. Each side's processes are its own, so the CPU each spends per run is counted apart.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from dataclasses import dataclass, field

from bench.agent_loop import AGENTS, SERVICES, cpu_by_part, percentile, postgres_pids, server_ms
from bench.local_system import LocalSystem, postgres_bin_argument


@dataclass
class Side:
    """One of the two systems and what its runs took."""

    name: str
    system: LocalSystem
    agent_ids: list[str]
    parts: dict[str, list[int]]
    gateway_ms: list[float] = field(default_factory=list)
    client_ms: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)

    async def one_run(self, text: str, i: int) -> tuple[float, float]:
        """One run (`text` decides 1 or 3 steps: bench.agent_loop.scripted): gateway and
        client milliseconds."""
        agent_id = self.agent_ids[i % len(self.agent_ids)]
        start = time.perf_counter()
        response = await self.system.http.post(
            f"/v1/agents/{agent_id}/messages", json={"input": f"{text} #{i}"}
        )
        client = (time.perf_counter() - start) * 1000
        assert response.status_code == 200, response.text
        assert response.json()["stop_reason"]["stop_reason"] == "end_turn"
        return server_ms(response), client


async def make_side(name: str, system: LocalSystem) -> Side:
    """AGENTS agents on `system` (runs go round-robin over them, as in bench.agent_loop)."""
    agent_ids = []
    for _ in range(AGENTS):
        created = await system.http.post(
            "/v1/agents/",
            json={
                "model": "openai/gpt-4o-mini",
                "memory_blocks": [{"label": "human", "value": "bench"}],
            },
        )
        assert created.status_code == 200, created.text
        agent_ids.append(created.json()["id"])
    servers = system.servers
    parts = {s: system.supervisor.pids(s) for s in SERVICES} | {
        "nats": [servers.nats.pid or 0],
        "postgres": postgres_pids(servers.postgres.pid or 0),
    }
    return Side(name, system, agent_ids, parts)


async def interleaved(
    a: Side, b: Side, text: str, runs: int, *, record: bool, pause: float = 0.0
) -> None:
    """`runs` pairs: one run on each side, the order flipped every pair, `pause` seconds
    between pairs (0: back to back, the machine as busy as one client can make it)."""
    await rounds([a, b], text, runs, record=record, pause=pause)


async def rounds(
    sides: list[Side], text: str, runs: int, *, record: bool, pause: float = 0.0
) -> None:
    """`runs` rounds of one run on each side, `pause` seconds between rounds. Two sides take
    turns going first; more go in an order drawn afresh every round (seeded), so that no side
    always follows the same other one (a run's wake, its projections and reactions, spills
    into the next run)."""
    before = {s.name: cpu_by_part(s.parts) for s in sides}
    for side in sides:
        side.gateway_ms, side.client_ms = [], []
    order = random.Random(len(sides))
    for i in range(runs):
        if len(sides) == 2:
            ordered = sides if i % 2 == 0 else sides[::-1]
        else:
            ordered = order.sample(sides, len(sides))
        for side in ordered:
            gateway, client = await side.one_run(text, i)
            if record:
                side.gateway_ms.append(gateway)
                side.client_ms.append(client)
        if pause:
            await asyncio.sleep(pause)  # (pacing the load, not waiting for anything)
    if record:
        for side in sides:
            after = cpu_by_part(side.parts)
            side.cpu_s = {n: after[n] - before[side.name][n] for n in side.parts}


@dataclass(frozen=True)
class Versus:
    """One kind of latency (the client's or the gateway's), b against a."""

    a_median: float
    b_median: float
    # The median of b's time minus a's, pair by pair.
    paired: float

    @property
    def percent(self) -> float:
        """b's median over a's, in percent more."""
        return 100 * (self.b_median / self.a_median - 1)


@dataclass(frozen=True)
class Figures:
    """What one comparison found: the client's view and the gateway's."""

    client: Versus
    gateway: Versus


def report(label: str, a: Side, b: Side) -> Figures:
    """Medians and p99 of each side, b against a, and the CPU each side spent per run."""
    runs = len(a.gateway_ms)
    print(f"{label}, {runs} pairs, ms (gateway: its Server-Timing; client: as the client saw it)")
    found: dict[str, Versus] = {}
    for kind in ("gateway", "client"):
        xs: list[float] = getattr(a, f"{kind}_ms")
        ys: list[float] = getattr(b, f"{kind}_ms")
        diffs = [y - x for x, y in zip(xs, ys, strict=True)]
        versus = Versus(statistics.median(xs), statistics.median(ys), statistics.median(diffs))
        found[kind] = versus
        print(
            f"  {kind:<8} {a.name} median {versus.a_median:6.2f} p99 {percentile(xs, 0.99):6.2f}"
            f" | {b.name} median {versus.b_median:6.2f} p99 {percentile(ys, 0.99):6.2f}"
            f" | {b.name}/{a.name} medians {versus.percent:+5.1f} %"
            f" | median paired difference {versus.paired:+5.2f} ms"
        )
    for side in (a, b):
        print_cpu(side, runs)
    return Figures(client=found["client"], gateway=found["gateway"])


def print_cpu(side: Side, runs: int) -> None:
    """The CPU the side's processes spent per run, by process."""
    spent = {n: v * 1000 / runs for n, v in side.cpu_s.items()}
    print(
        f"  CPU ms per run, {side.name}: total {sum(spent.values()):5.1f} = "
        + ", ".join(f"{n} {v:.1f}" for n, v in spent.items())
    )


KINDS = {"1-step": "hello", "3-step": "3 steps"}


async def compare(
    a: Side, b: Side, runs: int, warmup: int, pause: float = 0.0, kinds: tuple[str, ...] = ()
) -> dict[str, Figures]:
    """1-step runs, then 3-step runs (bench.agent_loop.scripted; `kinds`: only those),
    `warmup` pairs untimed and `runs` pairs timed each, `pause` seconds between timed pairs;
    a report of each, and its figures by kind."""
    found = {}
    for label, text in KINDS.items():
        if kinds and label not in kinds:
            continue
        await interleaved(a, b, text, warmup, record=False)
        await interleaved(a, b, text, runs, record=True, pause=pause)
        found[label] = report(label, a, b)
    return found


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A side-by-side benchmark's command line: --runs, --warmup and --postgres-bin."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="timed pairs of each kind")
    parser.add_argument("--warmup", type=int, default=40, help="untimed pairs before them")
    parser.add_argument(
        "--pause",
        type=float,
        default=0.0,
        help="seconds between timed pairs (default 0: back to back, the machine at its busiest)",
    )
    postgres_bin_argument(parser)
    return parser
