"""Archival search latency at 10k and 100k passages, against real Postgres + pgvector.

`make bench` (or `python bench/latency.py`). Passages are bulk-loaded with
COPY (random unit 384-d vectors, text drawn from a Zipf-distributed
vocabulary so that full-text queries hit many rows, as common words do);
going through the event log would only make the setup slower, not the
search. The HNSW index is built after each bulk load (as `CREATE INDEX` would
on a restored database): inserting 100k rows one by one into it takes ~11
minutes here and yields the same kind of graph. Each query runs the memory
service's whole search: HNSW candidates, full-text candidates, fusion and
memory-stream ranking. Query embedding is timed separately (local
all-MiniLM-L6-v2 on this CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path[:0] = [
    str(Path(__file__).resolve().parents[1] / p) for p in ("contracts", "services", ".")
]

import asyncpg  # noqa: E402
import numpy as np  # noqa: E402

from bench.retrieval import fresh_database  # noqa: E402
from o_memory import archival  # noqa: E402
from o_memory.stream import StreamSettings  # noqa: E402
from o_runtime.db import connect_pool  # noqa: E402

DIM = 384
MODEL = "local/all-MiniLM-L6-v2"
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def vocabulary(rng: random.Random, size: int = 5000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(4, 9))))
    return sorted(words)


def sampler(rng: random.Random, words: list[str]):  # type: ignore[no-untyped-def]
    weights = [1 / (i + 1) for i in range(len(words))]  # Zipf
    return lambda k: rng.choices(words, weights=weights, k=k)


def unit_vectors(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


async def load(
    pool: asyncpg.Pool,
    agent_id: str | None,
    start: int,
    n: int,
    draw,
    archive_id: str | None = None,
) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(start)
    vectors = unit_vectors(n, start)
    records = []
    for i in range(n):
        created = NOW - timedelta(hours=rng.uniform(0, 24 * 60))
        records.append(
            (
                f"passage-{uuid.uuid4()}", agent_id, " ".join(draw(12)), [], rng.randint(1, 10),
                "caller", "memory", [], MODEL, DIM, vectors[i], created, created, start + i,
                archive_id,
            )
        )  # fmt: skip
    async with pool.acquire() as conn:
        await conn.copy_records_to_table(
            "passages",
            records=records,
            columns=[
                "id", "agent_id", "text", "tags", "importance", "importance_source", "kind",
                "sources", "embedding_model", "dim", "embedding", "created_at",
                "last_accessed_at", "seq", "archive_id",
            ],
        )  # fmt: skip
        # The figures the archival projection keeps (a search reads a scope's size).
        await conn.execute(
            "INSERT INTO archival_counts AS c (agent_id, passages) VALUES ($1, $2)"
            " ON CONFLICT (agent_id) DO UPDATE SET passages = c.passages + EXCLUDED.passages",
            archive_id or agent_id,
            n,
        )


async def measure(pool: asyncpg.Pool, agent_id: str, draw, runs: int) -> list[float]:  # type: ignore[no-untyped-def]
    queries = unit_vectors(runs + 20, 999)
    settings = StreamSettings()
    times = []
    for i in range(runs + 20):
        t0 = time.perf_counter()
        await archival.search(
            pool, agent_id, query=" ".join(draw(3)), model=MODEL, vector=queries[i].tolist(),
            filters=archival.SearchFilter([]), settings=settings, top_k=10, now=NOW,
        )  # fmt: skip
        if i >= 20:  # the first few warm the caches
            times.append((time.perf_counter() - t0) * 1000)
    return times


def report(label: str, times: list[float]) -> None:
    times = sorted(times)
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    print(
        f"{label:<50} n={len(times):<5} p50 {statistics.median(times):6.1f} ms   p99 {p99:6.1f} ms",
        flush=True,
    )


async def run(admin_url: str, runs: int) -> None:
    dsn = await fresh_database(admin_url)
    pool = await connect_pool(dsn, max_size=4)
    rng = random.Random(7)
    draw = sampler(rng, vocabulary(rng))
    agent_id = f"agent-{uuid.uuid4()}"
    other = f"agent-{uuid.uuid4()}"
    loaded = 0
    for target in (10_000, 100_000):
        t0 = time.perf_counter()
        async with pool.acquire() as conn:
            index = await conn.fetchval(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'passages_hnsw_384'"
            )
            await conn.execute("DROP INDEX passages_hnsw_384")
        await load(pool, agent_id, loaded, target - loaded, draw)
        # Another agent's passages share the tables and indexes, as in production.
        await load(pool, other, 10_000_000 + loaded, (target - loaded) // 10, draw)
        loaded = target
        async with pool.acquire() as conn:
            await conn.execute("SET maintenance_work_mem = '1GB'")
            await conn.execute(index)
            await conn.execute("ANALYZE passages")
        print(f"loaded {target} passages for one agent (+10% for another) in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip
        times = await measure(pool, agent_id, draw, runs)
        report(f"search at {target // 1000}k passages (HNSW + FTS + ranking)", times)
    # An archive of 10k passages attached to the agent: its search takes in both (each
    # part's candidates apart, ranked together: o_memory/archival.py). And an agent with
    # few passages among all these, as most agents of a server are: its are read, not
    # found through the index (archival.EXACT_UP_TO).
    archive_id = f"archive-{uuid.uuid4()}"
    small = f"agent-{uuid.uuid4()}"
    async with pool.acquire() as conn:
        await conn.execute("DROP INDEX passages_hnsw_384")
    await load(pool, None, 20_000_000, 10_000, draw, archive_id)
    await load(pool, small, 30_000_000, 2_000, draw)
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO archive_agents (archive_id, agent_id, attached_seq) VALUES ($1, $2, 1)",
            archive_id,
            agent_id,
        )
        await conn.execute("SET maintenance_work_mem = '1GB'")
        await conn.execute(index)
        await conn.execute("ANALYZE passages")
    times = await measure(pool, agent_id, draw, runs)
    report("search at 100k passages + an archive of 10k attached", times)
    times = await measure(pool, other, draw, runs)
    report("another agent's search: its 10k passages of 122k", times)
    times = await measure(pool, small, draw, runs)
    report("a small agent's search: its 2k passages of 122k", times)
    await pool.close()
    from o_memory.embeddings import local_embedder

    embedder = local_embedder()
    embedder.embed_sync(["warm up"])
    times = []
    for i in range(runs):
        t0 = time.perf_counter()
        embedder.embed_sync([f"what did Sam say about project {i} last week?"])
        times.append((time.perf_counter() - t0) * 1000)
    report("query embedding (local all-MiniLM-L6-v2, CPU)", times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL")
    if url:
        asyncio.run(run(url, args.runs))
        return
    from o_devtools.embedded import start_servers

    with tempfile.TemporaryDirectory() as tmp, start_servers(Path(tmp), need_nats=False) as servers:
        assert servers.postgres is not None
        asyncio.run(run(servers.postgres.url, args.runs))


if __name__ == "__main__":
    main()
