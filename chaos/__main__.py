"""`python -m chaos` (`make chaos`): load O while killing its processes; check exactly once.

Exit status 0 only if no acknowledged request was lost or duplicated, no run was left active,
every block's versions are consistent and a full projection rebuild changed nothing the API
shows; 1 otherwise; 2 if the harness itself could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path

from chaos.harness import Params, run
from chaos.killer import TARGETS
from chaos.load import Shares
from chaos.report import render


def parse(argv: list[str] | None = None) -> Params:
    parser = argparse.ArgumentParser(
        prog="python -m chaos",
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    d = Params()
    parser.add_argument("--seed", type=int, default=d.seed, help="load and kill schedule")
    parser.add_argument("--duration", type=float, default=d.duration, help="seconds of load")
    parser.add_argument("--agents", type=int, default=d.agents, help="agents under load")
    parser.add_argument(
        "--auto-agents",
        type=int,
        default=d.auto_agents,
        help="of which evolve in mode auto (canaries and promotions), with --propose-share > 0",
    )
    parser.add_argument("--clients", type=int, default=d.clients, help="concurrent clients")
    parser.add_argument(
        "--kill-interval",
        type=float,
        default=d.kill_interval,
        help="mean seconds from one recovery to the next kill (0: no kills)",
    )
    parser.add_argument(
        "--targets",
        default=",".join(TARGETS),
        help="comma-separated",
    )
    for share in dataclasses.fields(Shares):
        flag = share.name.rstrip("_").replace("_", "-")
        parser.add_argument(
            f"--{flag}-share",
            dest=f"{share.name}_share",
            type=float,
            default=getattr(d.shares, share.name),
            metavar="SHARE",
            help=f"share of requests {share.metadata['help']}",
        )
    parser.add_argument(
        "--request-timeout", type=float, default=d.request_timeout, help="seconds per attempt"
    )
    parser.add_argument(
        "--retry-grace",
        type=float,
        default=d.retry_grace,
        help="seconds after the load during which failed requests are still retried",
    )
    parser.add_argument(
        "--recovery-timeout",
        type=float,
        default=d.recovery_timeout,
        help="seconds a kill may take to recover from before the next one",
    )
    parser.add_argument(
        "--server-grace",
        type=float,
        default=d.server_grace,
        help="seconds to wait for the supervisor to restart nats-server/Postgres",
    )
    parser.add_argument(
        "--restart",
        choices=("auto", "supervisor", "harness"),
        default=d.restart,
        help="who restarts a killed nats-server/Postgres (auto: the supervisor if it does)",
    )
    parser.add_argument(
        "--quiet-timeout",
        type=float,
        default=d.quiet_timeout,
        help="seconds to wait after the load for no run to be created/running",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for the system (e.g. O_EXECUTOR_REPLICAS=2)",
    )
    parser.add_argument("--data-dir", type=Path, help="default: a new temporary folder")
    parser.add_argument(
        "--code",
        type=Path,
        default=d.code,
        help="the source tree whose services run (default: this checkout); e.g. the commit"
        " before a fix (`git archive <commit> | tar -x -C DIR`), for figures before and after"
        " under one load and kill schedule",
    )
    parser.add_argument("--keep", action="store_true", help="keep the data folder on success")
    parser.add_argument(
        "--no-rebuild", action="store_true", help="skip the rebuild and its comparison"
    )
    parser.add_argument("--json", type=Path, help="write every request, kill and finding here")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown targets: {', '.join(unknown)} (known: {', '.join(TARGETS)})")
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--env needs KEY=VALUE, not {item!r}")
        env[key] = value
    return Params(
        seed=args.seed,
        duration=args.duration,
        agents=args.agents,
        auto_agents=args.auto_agents,
        clients=args.clients,
        kill_interval=args.kill_interval,
        targets=targets if args.kill_interval > 0 else [],
        shares=Shares(
            **{f.name: getattr(args, f"{f.name}_share") for f in dataclasses.fields(Shares)}
        ),
        request_timeout=args.request_timeout,
        retry_grace=args.retry_grace,
        recovery_timeout=args.recovery_timeout,
        server_grace=args.server_grace,
        restart=args.restart,
        quiet_timeout=args.quiet_timeout,
        env=env,
        base=args.data_dir,
        keep=args.keep,
        do_rebuild=not args.no_rebuild,
        json_path=args.json,
        code=args.code.resolve(),
    )


def main(argv: list[str] | None = None) -> int:
    params = parse(argv)
    start = time.monotonic()

    def progress(text: str) -> None:
        print(f"[{time.monotonic() - start:6.1f}s] {text}", file=sys.stderr, flush=True)

    try:
        report = asyncio.run(run(params, progress))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the harness could not run at all
        print(f"chaos: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(render(report), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
