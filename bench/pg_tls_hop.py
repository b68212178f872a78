"""What TLS costs one Postgres round trip: a prepared query and its ~2 KB row, plain and TLS.

bench.tls_hop measures a NATS hop; a 1-step run's path also has four or five Postgres round
trips (the gateway's read of the agent, the executor's reads, the runs projection's
transactions). This runs two Postgres servers from `--postgres-bin` (one plain, one with its
own TLS: `ssl=on`, `hostssl` only, clients with `sslmode=verify-full`, as
o_devtools/native_postgres.py sets them up for bench.security_cost) and asks each, from this
process on uvloop as the services are, the same prepared query through asyncpg. Rounds
alternate plain and TLS; each prints the round trip's median and p99, the CPU this process
(the client) spent per query and the CPU the connection's backend spent, so what TLS adds at
each end is seen apart.

    python -m bench.pg_tls_hop --postgres-bin DIR [--queries 3000] [--rounds 4] [--row-bytes 2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

import asyncpg  # noqa: E402

from bench.agent_loop import cpu_seconds  # noqa: E402
from bench.hop_rounds import HopSide, compare  # noqa: E402
from bench.local_system import postgres_bin_argument  # noqa: E402
from o_devtools.certs import make_certificates  # noqa: E402
from o_devtools.native_postgres import NativePostgres  # noqa: E402

WARMUP = 300
# A row about the size of an agent's (the gateway's read before it sends a run's command).
QUERY = "SELECT $1::text || repeat('x', $2::int) AS v"


@dataclass
class Side(HopSide):
    url: str = ""


async def one_round(side: Side, queries: int, row_bytes: int) -> None:
    conn = await asyncpg.connect(side.url)
    try:
        backend = await conn.fetchval("SELECT pg_backend_pid()")
        for _ in range(WARMUP):
            await conn.fetchval(QUERY, "a", row_bytes)
        backend_before, mine = cpu_seconds(backend), time.process_time()
        took = []
        for _ in range(queries):
            start = time.perf_counter()
            await conn.fetchval(QUERY, "a", row_bytes)
            took.append((time.perf_counter() - start) * 1e6)
        cpu = {
            "client": time.process_time() - mine,
            "backend": cpu_seconds(backend) - backend_before,
        }
    finally:
        await conn.close()
    side.record(took, cpu, queries)


def main(postgres_bin: Path, queries: int, rounds: int, row_bytes: int) -> None:
    with tempfile.TemporaryDirectory(prefix="o-pg-tls-hop-") as tmp:
        base = Path(tmp)
        certs = make_certificates(base / "certs")
        servers = [
            NativePostgres(base / "plain", postgres_bin),
            NativePostgres(base / "tls", postgres_bin, certs),
        ]
        try:
            for server in servers:
                server.start()
            sides = [Side("plain", url=servers[0].url), Side("TLS", url=servers[1].url)]
            compare(
                sides,
                rounds,
                lambda side: one_round(side, queries, row_bytes),
                f"{queries} queries of a {row_bytes}-byte row",
                "query",
            )
        finally:
            for server in servers:
                server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    postgres_bin_argument(parser)
    parser.add_argument("--queries", type=int, default=3000, help="timed queries a round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each (alternated)")
    parser.add_argument("--row-bytes", type=int, default=2000)
    args = parser.parse_args()
    if args.postgres_bin is None:
        parser.error("--postgres-bin (or O_POSTGRES_BIN_DIR): a Postgres built with SSL")
    main(args.postgres_bin, args.queries, args.rounds, args.row_bytes)
