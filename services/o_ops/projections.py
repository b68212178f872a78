"""`python -m o_ops projections rebuild [NAME ...]` and `... verify [NAME ...]`.

`rebuild` is `make rebuild` (o_devtools/rebuild.py: each projection replayed from the log
in one transaction while the system runs). `verify` rebuilds into a scratch schema and
compares (verify.py); it exits 1 when any projection differs from its log.
"""

from __future__ import annotations

import argparse
import json

from o_devtools.rebuild import PROJECTIONS, load, rebuild
from o_ops.connections import database, operator_log
from o_ops.settings import OpsSettings
from o_ops.verify import Verified, verify_projection

# Differences printed per table (all are counted; --json lists them all).
SHOWN = 20


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("projections", help="rebuild or verify the read models")
    verbs = parser.add_subparsers(dest="verb", required=True)
    for verb, about, run in (
        ("rebuild", "replay projections from the log (while the system runs)", run_rebuild),
        ("verify", "rebuild into a scratch schema and compare with the live tables", run_verify),
    ):
        sub = verbs.add_parser(verb, help=about)
        sub.add_argument(
            "names", nargs="*", help=f"projections (default: all of {', '.join(PROJECTIONS)})"
        )
        if verb == "verify":
            sub.add_argument("--json", action="store_true")
        sub.set_defaults(run=run)


class UnknownProjection(Exception):
    pass


def chosen(names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in PROJECTIONS]
    if unknown:
        raise UnknownProjection(
            f"unknown projection(s): {', '.join(unknown)} (known: {', '.join(PROJECTIONS)})"
        )
    return names or list(PROJECTIONS)


async def run_rebuild(args: argparse.Namespace, settings: OpsSettings) -> int:
    names = chosen(args.names)
    url, identity = settings.nats()
    done = await rebuild(names, url, settings.database(), identity)
    for name, rebuilt in done.items():
        line = f"{name}: replayed {rebuilt.replayed} events"
        if rebuilt.skipped:
            shown = ", ".join(str(s) for s in rebuilt.skipped[:10])
            line += f"; skipped {len(rebuilt.skipped)} it cannot apply (seq {shown})"
        print(line)
    return 0


async def run_verify(args: argparse.Namespace, settings: OpsSettings) -> int:
    names = chosen(args.names)
    results: list[Verified] = []
    async with operator_log(settings) as eventlog, database(settings) as pool:
        for name in names:
            results.append(await verify_projection(pool, eventlog, load(name)))
    if args.json:
        print(json.dumps([r.body() for r in results], indent=2, default=str))
    else:
        print(render(results))
    return 1 if any(r.differences for r in results) else 0


def render(results: list[Verified]) -> str:
    lines = []
    for r in results:
        head = f"{r.projection}: at seq {r.position}, {r.replayed} events replayed"
        if r.skipped:
            head += f" ({len(r.skipped)} skipped, as when live)"
        if not r.differences:
            lines.append(f"{head}: same as the log")
            continue
        lines.append(f"{head}: {r.differences} DIFFERENCE(S)")
        for table in r.tables:
            for row in table.rows[:SHOWN]:
                lines.append(f"  {row.describe(table.table)}")
            if len(table.rows) > SHOWN:
                lines.append(f"  ... and {len(table.rows) - SHOWN} more in {table.table}")
    return "\n".join(lines)
