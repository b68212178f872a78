"""Where on a 1-step run's path authentication and TLS add their time: each NATS milestone's
median, all off against all on.

bench.security_cost says how much a run costs more with everything on; this says where the
difference builds up. Two systems run side by side as there (all off; authentication, TLS to
NATS and TLS to Postgres on) and the client alternates between them. An observer on each
system's NATS (the operator's identity on the "on" side) hears every message (`>`) and notes
when the milestones of each run pass: the command's publish and delivery, the run queue's
and holdings' reads and writes, each event's append and its acknowledgement, the cursor's
write, the reply to the gateway. Printed: each milestone's median time since the request was
sent, off and on, and their difference; a difference that grows between two milestones
grew in the work between them (Postgres' statements there included).

    python -m bench.path_milestones [--runs 200] [--warmup 40] --postgres-bin DIR

The observer's own deliveries add load on both sides alike; the medians are for comparing
milestones, not for quoting as the cost (bench.security_cost is).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

import nats  # noqa: E402
from nats.aio.client import Client as NATS  # noqa: E402
from nats.aio.msg import Msg  # noqa: E402

from bench.agent_loop import SERVICES, scripted  # noqa: E402
from bench.local_system import local_system, postgres_bin_argument  # noqa: E402
from bench.side_by_side import Side, make_side  # noqa: E402
from bench.zero_latency_llm import ZeroLatencyLLM  # noqa: E402
from o_runtime.nats_identity import Identity  # noqa: E402

# Subject prefixes of the milestones (the reply subject tells a publish from a delivery).
_KINDS = (
    ("o.cmd.executor.", "command"),
    ("o.evt.agent.", "event"),
    ("_INBOX.gateway.", "to gateway"),
    ("_INBOX.executor.", "to executor"),
    ("$KV.o_held.", "holdings write"),
    ("$KV.o_executor_runs.", "cursor write"),
    ("$JS.API.DIRECT.GET.O_COMMANDS", "run queue look"),
    ("$JS.API.DIRECT.GET.O_EVENTS", "subject's last event"),
    ("$JS.ACK.O_COMMANDS.", "command acked"),
)


def milestone(subject: str, reply: str) -> str | None:
    """What a message is on the run's path (None: not a milestone). Events are counted as
    they are appended, not as each consumer receives them."""
    for prefix, kind in _KINDS:
        if subject.startswith(prefix):
            if kind == "command":
                return "command published" if reply.startswith("_INBOX.") else "command delivered"
            if kind == "event":
                return "event appended" if reply.startswith("_INBOX.") else None
            return kind
    return None


def numbered(heard: list[tuple[float, str, str]], start: float) -> Iterator[tuple[str, float]]:
    """The milestones of one run, each numbered by its occurrence, with ms since `start`."""
    seen: collections.Counter[str] = collections.Counter()
    for at, subject, reply in heard:
        kind = milestone(subject, reply)
        if kind is not None:
            seen[kind] += 1
            yield f"{kind} #{seen[kind]}", (at - start) * 1000


@dataclass
class Observed:
    """One system's side, its observer and what each milestone took, run by run."""

    side: Side
    nc: NATS
    heard: list[tuple[float, str, str]] = field(default_factory=list)
    times: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    runs_ms: list[float] = field(default_factory=list)

    async def listen(self) -> None:
        async def note(msg: Msg) -> None:
            self.heard.append((time.perf_counter(), msg.subject, msg.reply or ""))

        await self.nc.subscribe(">", cb=note)
        await self.nc.flush()

    async def one_run(self, i: int) -> None:
        # (What the previous run left going, its last acks and projections, is let finish.)
        await asyncio.sleep(0.03)
        self.heard.clear()
        start = time.perf_counter()
        await self.side.one_run("hello", i)
        end = time.perf_counter()
        self.runs_ms.append((end - start) * 1000)
        for name, ms in numbered([h for h in self.heard if h[0] <= end], start):
            self.times[name].append(ms)


async def main(runs: int, warmup: int, postgres_bin: Path | None) -> None:
    async with contextlib.AsyncExitStack() as stack:
        llm = stack.enter_context(ZeroLatencyLLM(scripted))
        # "off" first: the "on" side puts its client certificates and the operator's
        # identity in this process's environment (bench.security_cost says why).
        off_system = await stack.enter_async_context(
            local_system(llm.base_url, SERVICES, nats_auth=False, postgres_bin=postgres_bin)
        )
        tls = "all" if postgres_bin is not None else "nats"
        on_system = await stack.enter_async_context(
            local_system(llm.base_url, SERVICES, nats_auth=True, tls=tls, postgres_bin=postgres_bin)
        )
        off_nc = await nats.connect(off_system.servers.nats.url, name="observer")
        operator: dict[str, Any] = Identity.of("operator").options()
        on_nc = await nats.connect(on_system.servers.nats.url, name="observer", **operator)
        stack.push_async_callback(off_nc.close)
        stack.push_async_callback(on_nc.close)
        off = Observed(await make_side("off", off_system), off_nc)
        on = Observed(await make_side("on", on_system), on_nc)
        for i in range(warmup):
            await off.side.one_run("hello", i)
            await on.side.one_run("hello", i)
        await off.listen()
        await on.listen()
        for i in range(runs):
            pair = (off, on) if i % 2 else (on, off)
            for observed in pair:
                await observed.one_run(warmup + i)
        report(off, on, runs, tls)


def report(off: Observed, on: Observed, runs: int, tls: str) -> None:
    print(
        f"{runs} 1-step runs a side, alternated; on: authentication and TLS to"
        f" {'NATS and Postgres' if tls == 'all' else 'NATS'}."
        f" Medians, ms since the request was sent:"
    )
    print(f"  {'milestone':28s} {'off':>7s} {'on':>7s} {'on - off':>9s}")
    for name in sorted(off.times, key=lambda n: statistics.median(off.times[n])):
        a, b = off.times[name], on.times.get(name, [])
        if len(a) < runs * 0.8 or len(b) < runs * 0.8:
            continue  # (not on every run's path)
        med_a, med_b = statistics.median(a), statistics.median(b)
        print(f"  {name:28s} {med_a:7.2f} {med_b:7.2f} {med_b - med_a:+9.2f}")
    med_off, med_on = statistics.median(off.runs_ms), statistics.median(on.runs_ms)
    answer = "the answer, at the client"
    print(f"  {answer:28s} {med_off:7.2f} {med_on:7.2f} {med_on - med_off:+9.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="timed runs a side")
    parser.add_argument("--warmup", type=int, default=40, help="untimed runs a side first")
    postgres_bin_argument(parser)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.warmup, args.postgres_bin))
