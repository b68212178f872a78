"""Archival search over the projection: hybrid candidates, then memory-stream ranking.

Candidates come from two lists, each filtered by agent, tags and dates:
nearest neighbours by cosine distance (HNSW) and Postgres full-text matches
(so exact names and codes such as "XK-4471" are found even when their
embedding is unremarkable). The two are fused into one relevance per
candidate; memory-stream scoring (stream.py) then ranks the candidates.

Fusion is a convex combination of scores by default: cosine similarity plus
TEXT_WEIGHT x the full-text rank scaled to the best match. Reciprocal rank
fusion ("rrf") is kept as an option. Both find exact codes; the difference is
what the memory stream does next: it min-max normalises relevance over the
candidates, and RRF's rank-only scores (1/61, 1/62, ...) make the tenth-best
candidate look almost as relevant as the best, so recency and importance
swamp relevance. Scores keep the gaps between a real answer and a passage
that merely shares a name (`make bench` measures both).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import asyncpg

from o_memory.stream import Candidate, Scored, StreamSettings, rank

# Dimensions with an HNSW index (migration 0010); others are scanned exactly.
INDEXED_DIMS = (384, 1536)
RRF_K = 60
CANDIDATES_PER_LIST = 40
TEXT_WEIGHT = 0.3
Fusion = Literal["convex", "rrf"]

PASSAGE_COLUMNS = (
    "id, agent_id, text, tags, importance, importance_source, kind, sources, embedding_model,"
    " created_at, last_accessed_at"
)


@dataclass(frozen=True)
class SearchFilter:
    tags: list[str]
    tag_match_mode: Literal["any", "all"] = "any"
    start: datetime | None = None
    end: datetime | None = None


@dataclass(frozen=True)
class Hit:
    row: dict[str, Any]
    scored: Scored
    cosine: float | None


def _filters(f: SearchFilter, args: list[Any]) -> str:
    sql = ""
    if f.tags:
        args.append(f.tags)
        sql += f" AND tags {'@>' if f.tag_match_mode == 'all' else '&&'} ${len(args)}"
    if f.start:
        args.append(f.start)
        sql += f" AND created_at >= ${len(args)}"
    if f.end:
        args.append(f.end)
        sql += f" AND created_at <= ${len(args)}"
    return sql


async def _vector_list(
    conn: asyncpg.Connection, agent_id: str, model: str, vector: list[float], f: SearchFilter
) -> list[tuple[str, float]]:
    dim = len(vector)
    # The cast and the `dim = <literal>` predicate must appear literally for
    # the planner to use the partial expression index.
    col = f"embedding::vector({dim})" if dim in INDEXED_DIMS else "embedding"
    args: list[Any] = [agent_id, model, vector]
    where = _filters(f, args)
    rows = await conn.fetch(
        f"SELECT id, {col} <=> $3::vector({dim}) AS distance FROM passages"
        f" WHERE dim = {dim} AND agent_id = $1 AND embedding_model = $2{where}"
        f" ORDER BY {col} <=> $3::vector({dim}) LIMIT {CANDIDATES_PER_LIST}",
        *args,
    )
    return [(r["id"], 1.0 - float(r["distance"])) for r in rows]


async def _text_list(
    conn: asyncpg.Connection, agent_id: str, query: str, f: SearchFilter
) -> list[tuple[str, float]]:
    # Any query word may match (OR), ranked by cover density: a question
    # rarely contains every word of the passage that answers it.
    tsquery = await conn.fetchval(
        "SELECT array_to_string(ARRAY(SELECT quote_literal(l) FROM"
        " unnest(tsvector_to_array(to_tsvector('english', $1))) l), ' | ')",
        query,
    )
    if not tsquery:
        return []
    args: list[Any] = [agent_id, tsquery]
    where = _filters(f, args)
    rows = await conn.fetch(
        "SELECT id, ts_rank_cd(tsv, q) AS rank FROM passages, to_tsquery('simple', $2) q"
        f" WHERE agent_id = $1 AND tsv @@ q{where}"
        f" ORDER BY rank DESC, created_at DESC LIMIT {CANDIDATES_PER_LIST}",
        *args,
    )
    return [(r["id"], float(r["rank"])) for r in rows]


def fuse(*ranked: list[str]) -> dict[str, float]:
    """Reciprocal rank fusion: sum of 1 / (k + rank) over the lists an item is in."""
    fused: dict[str, float] = {}
    for ids in ranked:
        for i, pid in enumerate(ids):
            fused[pid] = fused.get(pid, 0.0) + 1.0 / (RRF_K + i + 1)
    return fused


def relevance(
    cosine: dict[str, float], text: list[tuple[str, float]], vector_ids: list[str], fusion: Fusion
) -> dict[str, float]:
    if fusion == "rrf":
        return fuse(vector_ids, [pid for pid, _ in text])
    best = max((r for _, r in text), default=0.0) or 1.0
    text_score = {pid: r / best for pid, r in text}
    return {pid: cos + TEXT_WEIGHT * text_score.get(pid, 0.0) for pid, cos in cosine.items()}


async def search(
    pool: asyncpg.Pool,
    agent_id: str,
    *,
    query: str,
    model: str,
    vector: list[float],
    filters: SearchFilter,
    settings: StreamSettings,
    top_k: int,
    now: datetime,
    fusion: Fusion = "convex",
) -> list[Hit]:
    dim = len(vector)
    async with pool.acquire() as conn, conn.transaction():
        # With filters, keep walking the HNSW graph until enough rows pass
        # them (pgvector >= 0.8), instead of returning too few.
        await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        by_vector = await _vector_list(conn, agent_id, model, vector, filters)
        by_text = await _text_list(conn, agent_id, query, filters)
        ids = list(dict.fromkeys([pid for pid, _ in by_vector] + [pid for pid, _ in by_text]))
        if not ids:
            return []
        # Text-only candidates need their cosine too (at most CANDIDATES_PER_LIST rows).
        rows = await conn.fetch(
            f"SELECT {PASSAGE_COLUMNS}, CASE WHEN dim = {dim} AND embedding_model = $3"
            f" THEN 1 - (embedding <=> $2::vector) ELSE 0 END AS cosine"
            " FROM passages WHERE id = ANY($1)",
            ids,
            vector,
            model,
        )
    by_id = {r["id"]: dict(r) for r in rows}
    cosine = {pid: float(by_id[pid]["cosine"]) for pid in ids if pid in by_id}
    rel = relevance(cosine, by_text, [pid for pid, _ in by_vector], fusion)
    candidates = [
        Candidate(pid, rel[pid], by_id[pid]["importance"], by_id[pid]["last_accessed_at"])
        for pid in ids
        if pid in by_id and pid in rel
    ]
    ranked = rank(candidates, settings, now)[:top_k]
    return [Hit(by_id[s.id], s, cosine.get(s.id)) for s in ranked]


async def unreflected(pool: asyncpg.Pool, agent_id: str) -> tuple[int, list[dict[str, Any]]]:
    """Summed importance of memories not reflected on yet, and those memories."""
    rows = await pool.fetch(
        "SELECT id, text, importance, seq FROM passages"
        " WHERE agent_id = $1 AND kind = 'memory' AND NOT reflected ORDER BY seq",
        agent_id,
    )
    return sum(r["importance"] for r in rows), [dict(r) for r in rows]
