"""Plain against TLS, round by round: what bench.tls_hop (a NATS hop) and bench.pg_tls_hop (a
Postgres round trip) share. Each side keeps its rounds' medians, every round trip for the p99
and the CPU each process spent per round trip; rounds alternate which side goes first, so the
machine's swings touch both alike; the report ends with TLS minus plain."""

from __future__ import annotations

import statistics
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from bench.agent_loop import percentile
from o_runtime.env import Env
from o_runtime.event_loop import loop_factory, run


@dataclass
class HopSide:
    name: str
    medians: list[float] = field(default_factory=list)
    all_us: list[float] = field(default_factory=list)
    # CPU microseconds per round trip, by process, one entry a round.
    cpu_us: dict[str, list[float]] = field(default_factory=dict)

    def record(self, took_us: list[float], cpu_seconds: dict[str, float], count: int) -> None:
        """One round: each round trip's microseconds, and each process's CPU over `count`."""
        self.medians.append(statistics.median(took_us))
        self.all_us.extend(took_us)
        for name, seconds in cpu_seconds.items():
            self.cpu_us.setdefault(name, []).append(seconds / count * 1e6)


def report(side: HopSide, per: str) -> str:
    cpu = ", ".join(f"{name} {statistics.median(v):.1f}" for name, v in side.cpu_us.items())
    return (
        f"  {side.name:5}  round trip median {statistics.median(side.medians):6.0f} us"
        f" (rounds {', '.join(f'{m:.0f}' for m in side.medians)}), p99 "
        f"{percentile(side.all_us, 0.99):6.0f} | CPU us per {per}: {cpu}"
    )


S = TypeVar("S", bound=HopSide)


def compare(
    sides: Sequence[S],
    rounds: int,
    one_round: Callable[[S], Awaitable[None]],
    a_round: str,
    per: str,
) -> None:
    """`rounds` rounds of `one_round` on each side (on uvloop, as the services run), the side
    going first flipped every round, then the comparison; `a_round` says what one round does
    ("3000 requests of 600 bytes"), `per` what one round trip is ("request")."""

    async def rounds_made() -> None:
        for i in range(rounds):
            for side in sides if i % 2 == 0 else sides[::-1]:
                await one_round(side)

    run(rounds_made(), loop_factory(Env({})))
    heading = f"{a_round} a round, {rounds} rounds, alternated (medians of the rounds)"
    print_comparison(sides, heading, per)


def print_comparison(sides: Sequence[HopSide], heading: str, per: str) -> None:
    """`heading`, each side's report, and TLS minus plain (sides: plain, then TLS)."""
    print(heading)
    for side in sides:
        print(report(side, per))
    plain, tls = sides
    print(
        f"  TLS - plain: {statistics.median(tls.medians) - statistics.median(plain.medians):+.0f}"
        " us a round trip; CPU "
        + ", ".join(
            f"{name} {statistics.median(tls.cpu_us[name]) - statistics.median(v):+.1f}"
            for name, v in plain.cpu_us.items()
        )
    )
