"""The services on asyncio's own event loop against uvloop (O_EVENT_LOOP), run by run.

Both systems side by side, the client alternating between them (bench/side_by_side.py).
`--tls` runs both with authentication and TLS (NATS, and Postgres with `--postgres-bin`), as
a deployment has them; without it both are as `make run` has them.

    python -m bench.event_loop_cost [--runs 400] [--warmup 40] [--tls] [--postgres-bin DIR]
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

from bench.agent_loop import SERVICES, scripted  # noqa: E402
from bench.local_system import local_system  # noqa: E402
from bench.side_by_side import arguments, compare, make_side  # noqa: E402
from bench.zero_latency_llm import ZeroLatencyLLM  # noqa: E402
from o_runtime.event_loop import EVENT_LOOP_ENV  # noqa: E402


async def main(runs: int, warmup: int, tls: bool, postgres_bin: Path | None) -> None:
    setting = ("all" if postgres_bin else "nats") if tls else None
    async with contextlib.AsyncExitStack() as stack:
        llm = stack.enter_context(ZeroLatencyLLM(scripted))
        sides = []
        for loop in ("asyncio", "uvloop"):
            system = await stack.enter_async_context(
                local_system(
                    llm.base_url,
                    SERVICES,
                    tls=setting,
                    postgres_bin=postgres_bin,
                    service_env={EVENT_LOOP_ENV: loop},
                )
            )
            sides.append(await make_side(loop, system))
        print(f"TLS: {setting or 'off'} | Postgres from {system.servers.postgres.bin_dir}")
        on_asyncio, on_uvloop = sides
        await compare(on_asyncio, on_uvloop, runs, warmup)


if __name__ == "__main__":
    parser = arguments(__doc__)
    parser.add_argument("--tls", action="store_true", help="both sides with auth and TLS")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.warmup, args.tls, args.postgres_bin))
