"""`python -m o_ops status [--json]`: services, consumers, projection lag and dead letters
(system_status.py gathers them; this prints them). Exits 1 when something stops the
system from working (a service missing or not ready, a durable missing, a lag over the
limit), 0 otherwise."""

from __future__ import annotations

import argparse
import json
import os

from o_ops.connections import database, operator_log
from o_ops.settings import OpsSettings
from o_ops.system_status import SERVICES, SystemStatus, expected_services, gather, max_lag
from o_ops.tables import seconds, table


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("status", help="services, consumers, lags and dead letters")
    parser.add_argument("--json", action="store_true", help="as JSON (what the API answers)")
    parser.add_argument(
        "--expect",
        default=None,
        help=f"services expected to answer, comma-separated (default: O_SERVICES or all: "
        f"{','.join(SERVICES)})",
    )
    parser.add_argument(
        "--max-lag",
        type=float,
        default=None,
        help="seconds of lag that count as a problem (default: O_READY_MAX_PROJECTION_LAG, 30)",
    )
    parser.set_defaults(run=run)


async def run(args: argparse.Namespace, settings: OpsSettings) -> int:
    expected = expected_services(args.expect, os.environ)
    limit = args.max_lag if args.max_lag is not None else max_lag(os.environ)
    async with operator_log(settings) as eventlog, database(settings) as pool:
        status = await gather(eventlog.nc, pool, expected=expected, lag_limit=limit)
    print(json.dumps(status.body(), indent=2) if args.json else render(status))
    return 1 if status.problems else 0


def render(status: SystemStatus) -> str:
    at = status.at.strftime("%Y-%m-%d %H:%M:%SZ")
    parts = [f"O at {at}: the log is at sequence {status.log_last_seq}", "", "Services"]
    rows: list[list[object]] = []
    for p in status.services:
        failing = "; ".join(f"{k}: {v}" for k, v in p.checks.items() if v != "ok")
        up = p.started_at.strftime("%Y-%m-%d %H:%M:%SZ")
        rows.append([p.service, p.instance, "yes" if p.ready else "NO", up, failing])
    rows += [[s, "-", "NO ANSWER", "", ""] for s in status.missing]
    parts.append(table(["service", "instance", "ready", "up since", "failing checks"], rows))
    parts += ["", "Consumers"]
    parts.append(
        table(
            ["stream", "consumer", "service", "pending", "ack pending", "redelivered",
             "waiting", "lag"],
            [
                [c.stream, c.name, c.service, c.pending, c.ack_pending, c.redelivered,
                 c.waiting, seconds(c.lag_seconds)]
                if c.present
                else [c.stream, c.name, c.service, "MISSING", "", "", "", ""]
                for c in status.consumers
            ],
        )
    )  # fmt: skip
    parts += ["", "Projections"]
    parts.append(
        table(
            ["projection", "service", "position", "lag"],
            [[p.name, p.service, p.position, seconds(p.lag_seconds)] for p in status.projections],
        )
    )
    parts += ["", "Dead letters"]
    if status.dead_letters:
        rows = [[c, n] for c, n in status.dead_letters.items()]
        rows.append(["total", sum(status.dead_letters.values())])
        parts.append(table(["consumer", "kept"], rows))
    else:
        parts.append("none")
    parts.append("")
    parts += [f"PROBLEM: {p}" for p in status.problems] or ["No problems."]
    parts += [f"note: {n}" for n in status.notes]
    return "\n".join(parts)
