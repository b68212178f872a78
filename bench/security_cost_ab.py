"""Whether a change moves what security costs: this checkout against another, each with
authentication and TLS off and on, four systems side by side.

    python -m bench.security_cost_ab --against DIR [--runs 400] [--warmup 40] [--pause S]
                                     [--postgres-bin DIR] [--steps 1|3|both]

bench.security_cost measures one checkout's cost, on against off, run by run. Comparing two
checkouts by running it on each, one after the other, compares two stretches of the machine's
time again: rounds of the same code differ by 2-3 points of the percentage (bench/README.md),
more than one change to a run's path moves it. Here the four systems run at once (`DIR` is
another checkout, e.g. a `git worktree` of the code before), and every round of the client
makes one run on each, their order rotated. So every round gives both checkouts' on - off
differences under the same load, and the difference between them: the median of that over
the rounds, with a bootstrap interval, says whether the change moved the cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

from bench.agent_loop import SERVICES, percentile, scripted  # noqa: E402
from bench.local_system import LocalSystem, local_system  # noqa: E402
from bench.security_cost import PARTS, tls_setting  # noqa: E402
from bench.side_by_side import Side, arguments, make_side, print_cpu, rounds  # noqa: E402
from bench.zero_latency_llm import ZeroLatencyLLM  # noqa: E402

# Resamples for the interval of a median (the rounds drawn again with replacement).
RESAMPLES = 2000
KINDS = {"1": ("1-step", "hello"), "3": ("3-step", "3 steps")}


def median_interval(xs: list[float], seed: int = 0) -> tuple[float, float]:
    """A 95 % bootstrap interval of the median of `xs` (percentiles of resampled medians)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(RESAMPLES))
    return medians[int(0.025 * RESAMPLES)], medians[int(0.975 * RESAMPLES) - 1]


def cost(off: Side, on: Side) -> list[float]:
    """What `on` took more than `off`, client ms, round by round."""
    return [y - x for x, y in zip(off.client_ms, on.client_ms, strict=True)]


def report(label: str, a_off: Side, a_on: Side, b_off: Side, b_on: Side) -> None:
    runs = len(a_off.client_ms)
    print(f"{label}, {runs} rounds of four, client ms")
    for side in (a_off, a_on, b_off, b_on):
        xs = side.client_ms
        print(
            f"  {side.name:<6} median {statistics.median(xs):6.2f} p99 {percentile(xs, 0.99):6.2f}"
        )
    costs = {}
    for off, on in ((a_off, a_on), (b_off, b_on)):
        diffs = costs[on.name] = cost(off, on)
        med_off, med_on = statistics.median(off.client_ms), statistics.median(on.client_ms)
        low, high = median_interval(diffs)
        print(
            f"  cost {on.name[0]}: on/off medians {100 * (med_on / med_off - 1):+5.1f} %"
            f" | median paired difference {statistics.median(diffs):+5.2f} ms"
            f" (95 % {low:+.2f} to {high:+.2f})"
        )
    moved = [b - a for a, b in zip(costs[a_on.name], costs[b_on.name], strict=True)]
    low, high = median_interval(moved)
    print(
        f"  B's cost - A's, round by round: median {statistics.median(moved):+5.2f} ms"
        f" (95 % {low:+.2f} to {high:+.2f})"
    )
    for side in (a_off, a_on, b_off, b_on):
        print_cpu(side, runs)


async def main(
    runs: int, warmup: int, postgres_bin: Path | None, against: Path, steps: str, pause: float
) -> None:
    on_parts = set(PARTS) if postgres_bin else set(PARTS) - {"postgres-tls"}
    async with contextlib.AsyncExitStack() as stack:
        llm = stack.enter_context(ZeroLatencyLLM(scripted))

        async def system(code: Path, on: bool) -> LocalSystem:
            return await stack.enter_async_context(
                local_system(
                    llm.base_url,
                    SERVICES,
                    nats_auth=on,
                    tls=tls_setting(on_parts) if on else None,
                    postgres_bin=postgres_bin,
                    code_root=code,
                )
            )

        # Both "off" first: a TLS system puts its client certificates in this process'
        # environment, which a system started afterwards would inherit.
        started = [await system(code, on) for on in (False, True) for code in (ROOT, against)]
        names = ["A-off", "B-off", "A-on", "B-on"]
        a_off, b_off, a_on, b_on = [
            await make_side(name, s) for name, s in zip(names, started, strict=True)
        ]
        print(
            f"A: {ROOT} | B: {against} | on: {', '.join(sorted(on_parts))}"
            f" | Postgres from {started[0].servers.postgres.bin_dir}"
        )
        sides = [a_off, a_on, b_off, b_on]
        for key in ("1", "3") if steps == "both" else (steps,):
            label, text = KINDS[key]
            await rounds(sides, text, warmup, record=False)
            await rounds(sides, text, runs, record=True, pause=pause)
            report(label, a_off, a_on, b_off, b_on)


if __name__ == "__main__":
    parser = arguments(__doc__)
    parser.add_argument(
        "--against", type=Path, required=True, help="the other checkout (B); A is this one"
    )
    parser.add_argument("--steps", choices=("1", "3", "both"), default="1")
    args = parser.parse_args()
    asyncio.run(
        main(
            args.runs,
            args.warmup,
            args.postgres_bin,
            args.against.resolve(),
            args.steps,
            args.pause,
        )
    )
