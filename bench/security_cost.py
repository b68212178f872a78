"""What authentication and TLS cost the agent loop, measured run by run (`make bench`).

Issue 21's comparison: NATS identities with permissions, TLS to NATS and TLS to Postgres,
all on, against all off (anonymous NATS, plain TCP), the same code on the same event loop.
Both systems run side by side and the client alternates between them (bench/side_by_side.py
says why: one configuration after the other measures the machine's swings as much as the
configuration).

    python -m bench.security_cost [--runs 400] [--warmup 40] [--postgres-bin DIR]
                                  [--on auth,nats-tls,postgres-tls] [--pause SECONDS]
                                  [--rounds N] [--kinds 1-step,3-step] [--against DIR]

Postgres' TLS needs a Postgres built with SSL and pgvector (`--postgres-bin`, or
O_POSTGRES_BIN_DIR; both systems then run it, on loopback ports). Without one, the "on" side
has no TLS to Postgres: the embedded Postgres wheel has no SSL, and the tests' TLS front
before it is a Python relay whose cost would be its own, not Postgres'. `--on` switches on
only some of the three, to see what each costs. `--pause` leaves that long between pairs: the
cost at a lighter load than one client back to back (bench/README.md says what it shows).

The machine's state moves one round's figure by a point or two either way, so the issue's
figure is a median over many rounds: `--rounds N` makes N rounds, each on two systems started
afresh, and ends with each round's figures, their medians and, from five rounds on, the
interval the median lies in with at least 90 % confidence (bench/median_interval.py)
(`--kinds 1-step`: the 1-step runs only, which halves a round).

`--against DIR` compares two versions of the code by the same figure: every round is made
twice, on this checkout's code and on DIR's (another checkout), the order of the two flipped
every round, and each version's rounds are summed up apart. (Four systems side by side,
bench.security_cost_ab, read the side named B up to a millisecond dearer whatever it ran:
rounds alternated in time do not have that bias, and the machine's swings touch both alike.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

from bench.agent_loop import SERVICES, scripted  # noqa: E402
from bench.local_system import local_system  # noqa: E402
from bench.median_interval import median_interval  # noqa: E402
from bench.side_by_side import KINDS, Figures, arguments, compare, make_side  # noqa: E402
from bench.zero_latency_llm import ZeroLatencyLLM  # noqa: E402
from o_runtime.event_loop import EVENT_LOOP_ENV  # noqa: E402

PARTS = ("auth", "nats-tls", "postgres-tls")


def tls_setting(on: set[str]) -> str | None:
    """local_system's `tls` for the parts switched on."""
    nats, postgres = "nats-tls" in on, "postgres-tls" in on
    return "all" if nats and postgres else "nats" if nats else "postgres" if postgres else None


async def one_round(
    runs: int,
    warmup: int,
    postgres_bin: Path | None,
    on_parts: set[str],
    pause: float = 0.0,
    kinds: tuple[str, ...] = (),
    code_root: Path = ROOT,
) -> dict[str, Figures]:
    if postgres_bin is None:
        on_parts = on_parts - {"postgres-tls"}
    # (Restored after: a TLS side's client certificates go into this process' environment.)
    environment = dict(os.environ)
    try:
        async with contextlib.AsyncExitStack() as stack:
            llm = stack.enter_context(ZeroLatencyLLM(scripted))
            # "off" first: starting a TLS side puts its client certificates in this
            # process' environment, which a system started afterwards would inherit.
            off_system = await stack.enter_async_context(
                local_system(
                    llm.base_url,
                    SERVICES,
                    nats_auth=False,
                    postgres_bin=postgres_bin,
                    code_root=code_root,
                )
            )
            on_system = await stack.enter_async_context(
                local_system(
                    llm.base_url,
                    SERVICES,
                    nats_auth="auth" in on_parts,
                    tls=tls_setting(on_parts),
                    postgres_bin=postgres_bin,
                    code_root=code_root,
                )
            )
            off = await make_side("off", off_system)
            on = await make_side("on", on_system)
            print(
                f"off: anonymous NATS, plain TCP | on: {', '.join(sorted(on_parts))}"
                f"{'' if postgres_bin else ' (no Postgres with SSL given: no postgres-tls)'}"
                f" | Postgres from {off_system.servers.postgres.bin_dir}"
                f" | event loop {os.environ.get(EVENT_LOOP_ENV) or 'uvloop'}"
            )
            return await compare(off, on, runs, warmup, pause, kinds)
    finally:
        os.environ.clear()
        os.environ.update(environment)


def round_order(i: int, versions: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """The versions of the code in the order round `i` (from 0) makes them: flipped every
    round, so that neither always runs first (on a machine warmer, or busier, later)."""
    return versions if i % 2 == 0 else versions[::-1]


async def main(
    runs: int,
    warmup: int,
    postgres_bin: Path | None,
    on_parts: set[str],
    pause: float = 0.0,
    rounds: int = 1,
    kinds: tuple[str, ...] = (),
    against: Path | None = None,
) -> None:
    versions = [("this", ROOT)] + ([("against", against)] if against is not None else [])
    found: dict[str, list[dict[str, Figures]]] = {name: [] for name, _ in versions}
    for i in range(rounds):
        for name, root in round_order(i, versions):
            if rounds > 1 or against is not None:
                which = f": {name} ({root})" if against is not None else ""
                print(f"== round {i + 1} of {rounds}{which}")
            figures = await one_round(runs, warmup, postgres_bin, on_parts, pause, kinds, root)
            found[name].append(figures)
    if rounds > 1 or against is not None:
        for name, root in versions:
            summary(found[name], f"{name} ({root})" if against is not None else "")


def summary(found: list[dict[str, Figures]], version: str = "") -> None:
    """Each round's on/off figures, and their medians (the issue's figure: the 1-step
    client's on/off medians, as a median over the rounds); `version` names the code they
    were made on (with --against)."""
    for kind in KINDS:
        figures = [f[kind] for f in found if kind in f]
        if not figures:
            continue
        on_code = f", {version}" if version else ""
        print(
            f"{kind}, {len(figures)} rounds{on_code}: on/off medians (client, gateway), paired ms"
        )
        for i, f in enumerate(figures, 1):
            print(
                f"  round {i:2d}: client {f.client.percent:+5.1f} % gateway"
                f" {f.gateway.percent:+5.1f} % | paired {f.client.paired:5.2f} ms"
                f" | client off median {f.client.a_median:6.2f} ms"
            )
        print(
            f"  median  : client {statistics.median(f.client.percent for f in figures):+5.2f} %"
            f" gateway {statistics.median(f.gateway.percent for f in figures):+5.2f} %"
            f" | paired {statistics.median(f.client.paired for f in figures):5.2f} ms"
        )
        # Where the median itself may lie (bench/median_interval.py): "within 5 %" is
        # shown when the whole interval is.
        client = median_interval([f.client.percent for f in figures])
        gateway = median_interval([f.gateway.percent for f in figures])
        if client is not None and gateway is not None:
            print(
                f"  median's {client.coverage:.0%} interval: client {client.low:+.1f} to"
                f" {client.high:+.1f} %, gateway {gateway.low:+.1f} to {gateway.high:+.1f} %"
                f" ({gateway.coverage:.0%})"
            )


if __name__ == "__main__":
    parser = arguments(__doc__)
    parser.add_argument(
        "--on",
        default=",".join(PARTS),
        help=f"what the 'on' side switches on, of {', '.join(PARTS)} (default: all of them)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds, each on two systems started afresh"
    )
    parser.add_argument(
        "--kinds",
        default="",
        help=f"only these kinds of run, of {', '.join(KINDS)} (default: both)",
    )
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        help="another checkout: each round is made on its code too, alternated with this one's",
    )
    args = parser.parse_args()
    if args.against is not None and not (args.against / "services").is_dir():
        parser.error(f"--against {args.against}: not a checkout of O (no services/ in it)")
    on_parts = set(filter(None, args.on.split(",")))
    if not on_parts <= set(PARTS):
        parser.error(f"--on takes {', '.join(PARTS)}")
    kinds = tuple(filter(None, args.kinds.split(",")))
    if not set(kinds) <= set(KINDS):
        parser.error(f"--kinds takes {', '.join(KINDS)}")
    asyncio.run(
        main(
            args.runs,
            args.warmup,
            args.postgres_bin,
            on_parts,
            args.pause,
            args.rounds,
            kinds,
            args.against.resolve() if args.against is not None else None,
        )
    )
