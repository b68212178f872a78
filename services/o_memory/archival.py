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

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import asyncpg

from o_memory.stream import Candidate, Scored, StreamSettings, rank

# Dimensions with an HNSW index (migration 0010); others are scanned exactly.
INDEXED_DIMS = (384, 1536)
RRF_K = 60
CANDIDATES_PER_LIST = 40
# A scope (an agent's own passages, an archive) this small, and less than half of the
# table, is searched by reading it, not through the HNSW index: the index serves the whole
# table, and walking it for the few passages a selective filter keeps costs more than
# reading them. Reading costs ~2.7 us a passage (27 ms for 10k); the index, for 10k
# passages among 122k, ~55 ms, but for 10k among 11k ~6 ms (bench/latency.py). (Postgres
# reads a scope of 2k by itself.)
EXACT_UP_TO = 10_000
TEXT_WEIGHT = 0.3
TEXT_MATCH_CAP = 300
Fusion = Literal["convex", "rrf"]

PASSAGE_COLUMNS = (
    "id, agent_id, text, tags, importance, importance_source, kind, sources, embedding_model,"
    " created_at, last_accessed_at, archive_id, metadata"
)
# The passages an agent's archival memory holds ($1 the agent): its own, and those of the
# archives attached to it (events/archives.py). For one passage by id; a search or a listing
# takes each part apart (OWN_SCOPE, ARCHIVE_SCOPE), as each has an index of its own and
# their OR has none: at 100k passages the OR made a search 13 -> 74 ms (bench/latency.py).
AGENT_SCOPE = (
    "(agent_id = $1 AND archive_id IS NULL"
    " OR archive_id IN (SELECT archive_id FROM archive_agents WHERE agent_id = $1))"
)
OWN_SCOPE = "agent_id = $1 AND archive_id IS NULL"
ARCHIVES_OF = (
    "SELECT coalesce(array_agg(archive_id ORDER BY attached_seq), '{}') FROM archive_agents"
    " WHERE agent_id = $1"
)
# The archive an agent's new memories go into: the first one attached to it (None: its own).
WRITES_TO = (
    "SELECT archive_id FROM archive_agents WHERE agent_id = $1 ORDER BY attached_seq LIMIT 1"
)


@dataclass(frozen=True)
class SearchFilter:
    tags: list[str] = field(default_factory=list)
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


# Whose passages a search looks at ($1: the archive, or NULL for all of them).
ARCHIVE_SCOPE = "archive_id = $1"
EVERY_PASSAGE = "$1::text IS NULL"


def reads_scope(size: int | None, table: float) -> bool:
    """Whether a scope of `size` passages (None: every passage) in a table of about `table`
    is searched by reading it rather than through the HNSW index (EXACT_UP_TO)."""
    return size is not None and size <= EXACT_UP_TO and 2 * size < table


def candidates_sql(
    dim: int, where: str, with_text: bool, scope: str = OWN_SCOPE, exact: bool = False
) -> str:
    """Both candidate lists and their details in one statement.

    $1 what `scope` names (an agent, an archive), $2 embedding model, $3 query vector,
    $4 the OR-tsquery text. `exact`: the nearest by scanning the scope's passages, not the
    HNSW index (a scope small beside the table: EXACT_UP_TO).
    """
    # The cast and the `dim = <literal>` predicate must appear literally for
    # the planner to use the partial expression index (and must not, for it not to).
    col = f"embedding::vector({dim})" if dim in INDEXED_DIMS and not exact else "embedding"
    text = (
        # Only the newest TEXT_MATCH_CAP matches are ranked: a word common in
        # the archive can match a fifth of 100k passages, and ranking them all
        # costs ~100 ms. Rare words (names, codes) match fewer; all are ranked.
        " m AS (SELECT id, tsv, created_at FROM passages"
        f"  WHERE {scope} AND tsv @@ to_tsquery('simple', $4){where}"
        f"  ORDER BY created_at DESC LIMIT {TEXT_MATCH_CAP}),"
        " t AS (SELECT id, ts_rank_cd(tsv, to_tsquery('simple', $4)) AS rank FROM m"
        f"  ORDER BY rank DESC, created_at DESC LIMIT {CANDIDATES_PER_LIST})"
        if with_text
        else " t AS (SELECT NULL::text AS id, NULL::real AS rank WHERE $4::text IS NULL)"
    )
    return (
        f"WITH v AS (SELECT id, {col} <=> $3::vector({dim}) AS distance FROM passages"
        f"  WHERE dim = {dim} AND {scope} AND embedding_model = $2{where}"
        f"  ORDER BY {col} <=> $3::vector({dim}) LIMIT {CANDIDATES_PER_LIST}),"
        f"{text}"
        f" SELECT {', '.join('p.' + c.strip() for c in PASSAGE_COLUMNS.split(','))},"
        " t.rank AS text_rank,"
        " CASE WHEN v.id IS NOT NULL THEN 1 - v.distance"
        f"  WHEN p.dim = {dim} AND p.embedding_model = $2 THEN 1 - (p.embedding <=> $3::vector)"
        "  ELSE 0 END AS cosine,"
        " v.id IS NOT NULL AS by_vector"
        " FROM passages p LEFT JOIN v ON v.id = p.id LEFT JOIN t ON t.id = p.id"
        " WHERE p.id IN (SELECT id FROM v UNION ALL SELECT id FROM t)"
    )


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
    agent_id: str | None,
    *,
    query: str,
    model: str,
    vector: list[float],
    filters: SearchFilter,
    settings: StreamSettings,
    top_k: int,
    now: datetime,
    fusion: Fusion = "convex",
    scope: str | None = None,
) -> list[Hit]:
    """The best `top_k` of `scope`'s passages for `query` (`agent_id`: what $1 in `scope`
    is: an archive, or None for every passage). Without `scope`, the agent `agent_id`'s
    archival memory: candidates from its own passages and from each of its archives',
    ranked together."""
    async with pool.acquire() as conn, conn.transaction():
        # iterative_scan: with filters, keep walking the HNSW graph until
        # enough rows pass them (pgvector >= 0.8). force_custom_plan: how many
        # passages a word matches decides the plan, so never reuse a generic
        # one. SET LOCAL: pooled connections are not reset on release (db.py).
        await conn.execute(
            "SET LOCAL hnsw.iterative_scan = relaxed_order;"
            " SET LOCAL plan_cache_mode = force_custom_plan"
        )
        # Any query word may match (OR), ranked by cover density: a question
        # rarely contains every word of the passage that answers it.
        tsquery = await conn.fetchval(
            "SELECT array_to_string(ARRAY(SELECT quote_literal(l) FROM"
            " unnest(tsvector_to_array(to_tsvector('english', $1))) l), ' | ')",
            query,
        )
        if scope is None:
            archives = await conn.fetchval(ARCHIVES_OF, agent_id)
            scopes = [(OWN_SCOPE, agent_id), *((ARCHIVE_SCOPE, a) for a in archives)]
        else:
            scopes = [(scope, agent_id)]
        # How many passages each scope holds (the archival projection keeps the figures),
        # and the table (Postgres' estimate).
        counted = await conn.fetch(
            "SELECT agent_id, passages, (SELECT reltuples FROM pg_class"
            " WHERE oid = 'passages'::regclass) AS total FROM archival_counts"
            " WHERE agent_id = ANY($1)",
            [key for _, key in scopes if key is not None],
        )
        sizes = {r["agent_id"]: r["passages"] for r in counted}
        total = float(counted[0]["total"]) if counted else 0.0
        rows: list[dict[str, Any]] = []
        for where_scope, key in scopes:
            args: list[Any] = [key, model, vector, tsquery or None]
            exact = reads_scope(sizes.get(key, 0) if key is not None else None, total)
            sql = candidates_sql(
                len(vector), _filters(filters, args), bool(tsquery), where_scope, exact
            )
            rows += [dict(r) for r in await conn.fetch(sql, *args)]
    by_id = {r["id"]: r for r in rows}
    cosine = {r["id"]: float(r["cosine"]) for r in rows}
    text = sorted(
        ((r["id"], float(r["text_rank"])) for r in rows if r["text_rank"] is not None),
        key=lambda t: -t[1],
    )
    nearest = sorted((r["id"] for r in rows if r["by_vector"]), key=lambda pid: -cosine[pid])
    rel = relevance(cosine, text, nearest, fusion)
    candidates = [
        Candidate(pid, rel[pid], r["importance"], r["last_accessed_at"])
        for pid, r in by_id.items()
        if pid in rel
    ]
    ranked = rank(candidates, settings, now)[:top_k]
    return [Hit(by_id[s.id], s, cosine.get(s.id)) for s in ranked]


async def effect_of(conn: asyncpg.Pool | asyncpg.Connection, command_id: str) -> int | None:
    """The log position of the archival event `command_id` made, if the projection has it
    (archival_effects: a command delivered again is answered from it)."""
    seq: int | None = await conn.fetchval(
        "SELECT seq FROM archival_effects WHERE command_id = $1", command_id
    )
    return seq


async def unreflected(pool: asyncpg.Pool, agent_id: str) -> tuple[int, list[dict[str, Any]]]:
    """Summed importance of memories not reflected on yet, and those memories."""
    rows = await pool.fetch(
        "SELECT id, text, importance, seq FROM passages"
        " WHERE agent_id = $1 AND kind = 'memory' AND NOT reflected ORDER BY seq",
        agent_id,
    )
    return sum(r["importance"] for r in rows), [dict(r) for r in rows]
