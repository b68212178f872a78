"""Folders benchmark: ingestion throughput and file search latency at 1,000 files.

`make bench` (or `python -m bench.folders`). A seeded corpus of 1,000 files of every kind
an upload takes (markdown, text, code, HTML, JSON, CSV and multi-page PDFs made here) goes
through the memory service's own steps, each timed apart:

  parse   o_memory.files.parsing.parse (pypdf for PDFs, html.parser for HTML)
  chunk   o_memory.files.chunking at the default chunk size (300 tokens)
  embed   the local all-MiniLM-L6-v2 (o_memory.embeddings), batches of 32 chunks
  store   the folders projection's handlers (the rows the worker's events make) in
          real Postgres with pgvector (embedded, or DATABASE_URL)

and is reported as MB/s (bytes uploaded) and pages/s (PDF pages). The log and the object
store are left out: they are a few appends per batch, measured by the other benches.

Then an agent with every folder attached searches them as the file tools do
(o_memory.files.search): grep_files with patterns that match one file, a few or many,
and semantic_search_files (the query embedded locally, then pgvector's HNSW index);
p50 and p99 of each over `--queries` searches.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / p) for p in ("contracts", "services", ".")]

import asyncpg  # noqa: E402

from bench.tables import table  # noqa: E402
from o_contracts import subjects  # noqa: E402
from o_contracts.base import Event, Message  # noqa: E402
from o_contracts.envelope import Envelope  # noqa: E402
from o_contracts.events import (  # noqa: E402
    FileChunksEmbedded,
    FileParsed,
    FileProcessed,
    FileProcessingStarted,
    FileUploaded,
    FolderAttached,
    FolderCreated,
)
from o_contracts.events.folders import FileChunk  # noqa: E402
from o_contracts.vectors import pack_vector  # noqa: E402
from o_memory.embeddings import LOCAL_MODEL, local_embedder  # noqa: E402
from o_memory.files import search  # noqa: E402
from o_memory.files.chunking import chunk_ends, spans, target_chars  # noqa: E402
from o_memory.files.parsing import parse  # noqa: E402
from o_memory.files.projection import folders  # noqa: E402
from o_runtime.db import connect_pool, migrate  # noqa: E402
from o_runtime.eventlog import Recorded  # noqa: E402
from tests.pdf_fixture import tiny_pdf  # noqa: E402

EMBED_BATCH = 32
FILES_PER_FOLDER = 100
WORDS = (
    "ledger invoice harbor glacier orchard turbine lantern quarry meadow beacon canyon "
    "falcon garnet hollow island jasmine kettle lagoon marble nectar oyster pepper quartz "
    "raven saddle timber umber velvet walnut yarrow zephyr anchor bridge copper delta ember "
    "fjord granite heron ivory juniper kiln lumen mosaic nickel onyx pylon quill ripple "
    "summit tundra"
).split()
TOPICS = (
    "holiday policy",
    "security incident response",
    "onboarding checklist",
    "quarterly revenue",
    "database migrations",
    "office plants",
    "travel expenses",
    "release process",
    "customer support macros",
    "hiring pipeline",
)


@dataclass
class Doc:
    name: str
    mime: str
    data: bytes
    topic: str
    kind: str


@dataclass
class Stage:
    seconds: float = 0.0
    bytes: int = 0
    pages: int = 0
    files: int = 0
    chunks: int = 0


def sentence(rng: random.Random, topic: str, n: int) -> str:
    return f"Note {n} on {topic}: " + " ".join(rng.choices(WORDS, k=12)) + "."


def make_doc(rng: random.Random, i: int, marker: str | None, short: bool) -> Doc:
    """One file of a kind picked by `i`: about 1-6 KB of text (PDFs: 2-8 pages), or
    `short`, a few lines (one chunk, a one-page PDF)."""
    topic = TOPICS[i % len(TOPICS)]
    lines = [
        sentence(rng, topic, n) for n in range(rng.randint(3, 6) if short else rng.randint(12, 60))
    ]
    if marker:
        lines.insert(len(lines) // 2, f"The access code is {marker}.")
    kind = ("md", "txt", "py", "html", "json", "csv", "pdf", "md", "txt", "md")[i % 10]
    text = "\n".join(lines)
    if kind == "md":
        body = f"# {topic.title()} ({i})\n\n" + "\n\n".join(
            "\n".join(lines[k : k + 5]) for k in range(0, len(lines), 5)
        )
        return Doc(f"doc-{i}.md", "text/markdown", body.encode(), topic, kind)
    if kind == "txt":
        return Doc(f"doc-{i}.txt", "text/plain", text.encode(), topic, kind)
    if kind == "py":
        body = "\n".join(
            f"def step_{n}() -> str:\n    return {line!r}\n" for n, line in enumerate(lines)
        )
        return Doc(f"doc_{i}.py", "text/x-python", body.encode(), topic, kind)
    if kind == "html":
        body = "<html><body><h1>{}</h1>{}</body></html>".format(
            topic, "".join(f"<p>{line}</p>\n" for line in lines)
        )
        return Doc(f"doc-{i}.html", "text/html", body.encode(), topic, kind)
    if kind == "json":
        body = json.dumps({"topic": topic, "notes": lines}, indent=1)
        return Doc(f"doc-{i}.json", "application/json", body.encode(), topic, kind)
    if kind == "csv":
        body = "n,note\n" + "\n".join(f'{n},"{line}"' for n, line in enumerate(lines))
        return Doc(f"doc-{i}.csv", "text/csv", body.encode(), topic, kind)
    pages = [lines[k : k + 8] for k in range(0, len(lines), 8)]
    return Doc(f"doc-{i}.pdf", "application/pdf", tiny_pdf(pages), topic, kind)


def corpus(count: int, full: int, seed: int) -> tuple[list[Doc], dict[str, str]]:
    """`count` files, the first `full` of them of full size and the rest short; 20 of them
    hold a unique access code (what grep looks for)."""
    rng = random.Random(seed)
    codes = {f"ZX-{1000 + k}": "" for k in range(20)}
    marked = dict(zip(rng.sample(range(count), len(codes)), codes, strict=True))
    docs = [make_doc(rng, i, marked.get(i), i >= full) for i in range(count)]
    for i, code in marked.items():
        codes[code] = docs[i].name
    return docs, codes


def recorded(event: Event, subject: str, seq: int) -> Recorded:
    envelope = Envelope.wrap(event, aggregate_id="bench", producer="bench", time=datetime.now(UTC))
    return Recorded(seq=seq, subject=subject, envelope=cast(Envelope[Message], envelope))


class Store:
    """The folders projection's rows, made by its own handlers from the worker's events."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.seq = 0

    async def apply(self, event: Event, subject: str) -> None:
        self.seq += 1
        await folders.handlers[event.type_name()](self.conn, recorded(event, subject, self.seq))


@dataclass
class Ingested:
    stages: dict[str, Stage] = field(default_factory=lambda: defaultdict(Stage))
    by_kind: dict[str, Stage] = field(default_factory=lambda: defaultdict(Stage))


async def ingest(store: Store, docs: list[Doc], full: int, agent_id: str) -> Ingested:
    embedder = local_embedder()
    await embedder.embed(["warm up"])  # the model loads once per process (~5 s)
    target = target_chars(None)
    out = Ingested()
    folder_ids: list[str] = []
    for n, doc in enumerate(docs):
        if n % FILES_PER_FOLDER == 0:
            folder_ids.append(f"source-{uuid.uuid4()}")
            await store.apply(
                FolderCreated(
                    folder_id=folder_ids[-1],
                    name=f"bench-{len(folder_ids)}",
                    embedding_config={"handle": LOCAL_MODEL, "embedding_chunk_size": 300},
                ),
                subjects.folder_subject(folder_ids[-1]),
            )
        folder_id, file_id = folder_ids[-1], f"file-{uuid.uuid4()}"
        folder_subject = subjects.folder_subject(folder_id)
        file_subject = subjects.file_subject(folder_id, file_id)
        ids = {"folder_id": folder_id, "file_id": file_id}
        await store.apply(
            FileUploaded(
                **ids,
                file_name=f"bench-{len(folder_ids)}/{doc.name}",
                original_file_name=doc.name,
                file_type=doc.mime,
                file_size=len(doc.data),
                sha256="0" * 64,
            ),
            folder_subject,
        )
        await store.apply(FileProcessingStarted(**ids), file_subject)

        t0 = time.perf_counter()
        parsed = parse(doc.data, doc.mime)
        t1 = time.perf_counter()
        ends = chunk_ends(parsed.text, target)
        pieces = spans(parsed.text, ends)
        t2 = time.perf_counter()
        vectors: list[list[float]] = []
        for k in range(0, len(pieces), EMBED_BATCH):
            vectors += await embedder.embed([p.strip() for p in pieces[k : k + EMBED_BATCH]])
        t3 = time.perf_counter()
        await store.apply(
            FileParsed(
                **ids,
                text_sha256="0" * 64,
                chars=len(parsed.text),
                pages=parsed.pages,
                chunk_ends=ends,
                embedding_model=embedder.name,
            ),
            file_subject,
        )
        chunks = [
            FileChunk(index=i, text=p, embedding=pack_vector(v))
            for i, (p, v) in enumerate(zip(pieces, vectors, strict=True))
        ]
        for k in range(0, len(chunks), EMBED_BATCH):
            await store.apply(
                FileChunksEmbedded(
                    **ids, embedding_model=embedder.name, chunks=chunks[k : k + EMBED_BATCH]
                ),
                file_subject,
            )
        await store.apply(FileProcessed(**ids), file_subject)
        t4 = time.perf_counter()

        pages = parsed.pages or 0
        if n < full:
            for name, seconds in (
                ("parse", t1 - t0),
                ("chunk", t2 - t1),
                ("embed", t3 - t2),
                ("store", t4 - t3),
            ):
                out.stages[name].seconds += seconds
        if n >= full:
            short = out.by_kind["short files"]
            short.seconds += t4 - t0
            short.bytes += len(doc.data)
            short.pages += pages
            short.files += 1
            short.chunks += len(ends)
            continue
        for stage in (out.stages["all"], out.by_kind[doc.kind]):
            stage.seconds += t4 - t0
            stage.bytes += len(doc.data)
            stage.pages += pages
            stage.files += 1
            stage.chunks += len(ends)
    for folder_id in folder_ids:
        await store.apply(
            FolderAttached(agent_id=agent_id, folder_id=folder_id),
            subjects.agent_subject(agent_id),
        )
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed(calls: list[Any]) -> tuple[list[float], list[str]]:
    seconds, answers = [], []
    for call in calls:
        t0 = time.perf_counter()
        answers.append(await call())
        seconds.append(time.perf_counter() - t0)
    return seconds, answers


async def run(url: str, files: int, full: int, queries: int, seed: int) -> None:
    await migrate(url)
    pool = await connect_pool(url)
    agent_id = f"agent-{uuid.uuid4()}"
    docs, codes = corpus(files, full, seed)
    async with pool.acquire() as conn:
        ingested = await ingest(Store(conn), docs, full, agent_id)
        await conn.execute("ANALYZE folder_files; ANALYZE folder_file_chunks")

    all_ = ingested.stages["all"]
    mb = all_.bytes / 1e6
    print(
        f"{all_.files} files of 1-6 KB, {mb:.2f} MB, {all_.pages} PDF pages, {all_.chunks} chunks"
        f" ({LOCAL_MODEL}, CPU, {os.cpu_count()} cores; seed {seed})\n"
    )
    print("Ingestion (parse, chunk, embed, store), by kind of file:")
    rows = []
    short = ingested.by_kind.pop("short files", None)
    for kind, s in sorted(ingested.by_kind.items()):
        rows.append(
            [
                kind,
                s.files,
                f"{s.bytes / 1e6:.2f}",
                s.chunks,
                f"{s.bytes / 1e6 / s.seconds:.3f}",
                f"{s.pages / s.seconds:.1f}" if s.pages else "-",
                f"{s.chunks / s.seconds:.1f}",
            ]
        )
    rows.append(
        [
            "all",
            all_.files,
            f"{mb:.2f}",
            all_.chunks,
            f"{mb / all_.seconds:.3f}",
            f"{all_.pages / ingested.by_kind['pdf'].seconds:.1f}",
            f"{all_.chunks / all_.seconds:.1f}",
        ]
    )
    if short is not None:
        rows.append(
            [
                "short files",
                short.files,
                f"{short.bytes / 1e6:.2f}",
                short.chunks,
                f"{short.bytes / 1e6 / short.seconds:.3f}",
                "-",
                f"{short.chunks / short.seconds:.1f}",
            ]
        )
    print(table(["kind", "files", "MB", "chunks", "MB/s", "pages/s", "chunks/s"], rows))
    print("\nWhere the time goes:")
    total = sum(ingested.stages[s].seconds for s in ("parse", "chunk", "embed", "store"))
    print(
        table(
            ["stage", "seconds", "share", "MB/s alone"],
            [
                [
                    s,
                    f"{ingested.stages[s].seconds:.2f}",
                    f"{100 * ingested.stages[s].seconds / total:.1f}%",
                    f"{mb / ingested.stages[s].seconds:.2f}",
                ]
                for s in ("parse", "chunk", "embed", "store")
            ],
        )
    )

    rng = random.Random(seed + 1)
    code_list = list(codes)
    grep_one = [
        (lambda c=c: grep(pool, agent_id, {"pattern": c}))
        for c in rng.choices(code_list, k=queries)
    ]
    grep_regex = [
        (lambda: grep(pool, agent_id, {"pattern": r"ZX-10\d\d"})) for _ in range(queries // 4)
    ]
    grep_many = [
        (lambda w=w: grep(pool, agent_id, {"pattern": w})) for w in rng.choices(WORDS, k=queries)
    ]
    semantic = [
        (lambda t=t: search.semantic(pool, agent_id, {"query": t, "limit": 5}))
        for t in rng.choices(TOPICS, k=queries)
    ]
    results: list[list[str]] = []
    checks: list[str] = []
    for name, calls in (
        ("grep_files, a code in 1 file", grep_one),
        ("grep_files, regex (20 files)", grep_regex),
        ("grep_files, a common word", grep_many),
        ("semantic_search_files, top 5", semantic),
    ):
        seconds, answers = await timed(calls)
        ms = [1000 * s for s in seconds]
        results.append(
            [name, str(len(ms)), f"{percentile(ms, 0.5):.1f}", f"{percentile(ms, 0.99):.1f}"]
        )
        checks.append(answers[0].splitlines()[0])
    # The answers are real: a code is found in its one file.
    found = await grep(pool, agent_id, {"pattern": code_list[0]})
    assert f"/{codes[code_list[0]]}:" in found, found
    folder_count = -(-len(docs) // FILES_PER_FOLDER)
    print(f"\nFile search, one agent with {files} files attached ({folder_count} folders):")
    print(table(["search", "n", "p50 ms", "p99 ms"], results))
    print("\nFirst answers:")
    for line in checks:
        print(f"  {line}")
    await pool.close()


async def grep(pool: asyncpg.Pool, agent_id: str, args: dict[str, Any]) -> str:
    async with pool.acquire() as conn:
        return await search.grep(conn, agent_id, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000, help="files searched")
    parser.add_argument(
        "--full",
        type=int,
        default=100,
        help="how many of them are of full size (1-6 KB, PDFs of 2-8 pages): the ingestion"
        " figures; the rest are a few lines each (one chunk), to keep the local embedder's"
        " time in reason",
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    url = os.environ.get("DATABASE_URL")
    if url:
        asyncio.run(run(url, args.files, args.full, args.queries, args.seed))
        return
    from o_devtools.embedded import start_servers

    with tempfile.TemporaryDirectory() as tmp, start_servers(Path(tmp), need_nats=False) as servers:
        assert servers.postgres is not None
        asyncio.run(run(servers.postgres.url, args.files, args.full, args.queries, args.seed))


if __name__ == "__main__":
    main()
