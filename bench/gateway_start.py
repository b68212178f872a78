"""How long a gateway process takes from its spawn to its first HTTP answer: what a client
waits for after a gateway dies and its supervisor starts another (the executor has a spare
process for this; the gateway has none). Fresh interpreters, one after the other; with
`--against DIR`, runs of this checkout and of DIR's alternate, so the machine's swings touch
both alike.

Each run spawns `python -c ...` with a checkout's code on its path: it imports the gateway's
app, builds it and routes one request through it in process (httpx's ASGI transport, to a
path no route matches, so every route is tried), then prints the wall-clock time. The figure
is that time less the parent's just before the spawn: interpreter start, imports, the app,
its routes, the first request. Connecting to NATS and Postgres is not in it (the same for
any code). Python keeps no bytecode where PYTHONDONTWRITEBYTECODE is set: `make bytecode`
(which `make run` and `make bench` do first) compiles a checkout's modules ahead; for DIR,
run `python -m compileall -q DIR/contracts DIR/services` to compare like with like.

    python -m bench.gateway_start [--runs 15] [--against DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import asyncio, time
import httpx
from o_gateway.app import create_app

app = create_app(None)

async def first_answer() -> None:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        answer = await http.get("/v1/no-such-route")
        assert answer.status_code == 404, answer.status_code

asyncio.run(first_answer())
print(time.time())
"""


def one_start(checkout: Path) -> float:
    """Seconds from the spawn of a gateway interpreter to its first answer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("O_")}
    env["PYTHONPATH"] = os.pathsep.join(str(checkout / p) for p in ("contracts", "services", "."))
    spawned = time.time()
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the gateway of {checkout} did not answer:\n{done.stderr}")
    return float(done.stdout.strip().splitlines()[-1]) - spawned


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    slowest = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (
        f"median {statistics.median(ordered):.2f} s, fastest {ordered[0]:.2f}, "
        f"90th percentile {slowest:.2f} ({len(ordered)} starts)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--against", type=Path, help="another checkout, alternated with this one")
    args = parser.parse_args()
    sides = {"this checkout": ROOT}
    if args.against is not None:
        sides[f"{args.against}"] = args.against.resolve()
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.runs):
        for name, checkout in sides.items():
            times[name].append(one_start(checkout))
    print("gateway: spawn to first answer (imports, app, routes, one request)")
    for name, seen in times.items():
        print(f"  {name}: {summary(seen)}")


if __name__ == "__main__":
    main()
