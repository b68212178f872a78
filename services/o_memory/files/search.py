"""grep_files and semantic_search_files over the processed files of an agent's folders,
answered as Letta's file tools answer (the same summaries, pages of 20 matches).

Reads only: nothing is recorded, so a resumed run may search again. grep runs the
pattern in Python over each file's numbered lines (the lines open_files shows), after
Postgres narrows the files to those whose text matches at all when the pattern means
the same to both (no escapes, anchors or (?...) groups). Semantic search embeds the
query once per embedding model of the folders and asks pgvector for the nearest chunks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import asyncpg

from o_contracts.file_types import of_mime
from o_memory.embeddings import Embedder, EmbeddingError, embedder_for
from o_memory.files.lines import numbered, units

PAGE = 20
MAX_COLLECTED = 1000
MAX_PATTERN = 1000
MAX_CONTEXT_LINES = 20
MAX_SEMANTIC_RESULTS = 50
# Dimensions with an HNSW index (0067_folders.sql).
INDEXED_DIMS = (384, 1536)


class FileToolError(ValueError):
    """Bad arguments or nothing to search; the message is for the model."""


def _int(args: dict[str, Any], name: str, default: int | None) -> int | None:
    value = args.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise FileToolError(f"{name} must be an integer")
    return value


def _compiled(pattern: str, what: str) -> re.Pattern[str]:
    if len(pattern) > MAX_PATTERN:
        raise FileToolError(f"Pattern too complex: {len(pattern)} chars > {MAX_PATTERN} limit")
    try:
        return re.compile(pattern, re.IGNORECASE | re.MULTILINE)
    except re.error as exc:
        raise FileToolError(f"Invalid regex pattern{what}: {exc}") from exc


def include_regex(include: str) -> re.Pattern[str]:
    """A file-name filter: a glob such as '*.md' (Letta's reading), else a regex."""
    if "*" in include and not any(c in include for c in "^$()[]{}\\+"):
        include = include.replace(".", r"\.").replace("*", ".*").replace("?", ".") + "$"
    return _compiled(include, " for include")


def prefilter(pattern: str) -> str | None:
    """The pattern for Postgres to narrow the files with, when it means the same there."""
    if any(c in pattern for c in "\\^$") or "(?" in pattern:
        return None
    return pattern


@dataclass(frozen=True)
class Match:
    file_name: str
    line: int
    context: list[str]


_FILES = (
    "SELECT f.file_name, f.file_type, f.content FROM agent_folders af"
    " JOIN folder_files f ON f.folder_id = af.folder_id"
    " WHERE af.agent_id = $1 AND f.status = 'completed'{narrow}"
    " ORDER BY af.attached_seq, f.created_at, f.id"
)


async def _grep_files(
    conn: asyncpg.Connection, agent_id: str, pattern: str
) -> tuple[list[asyncpg.Record], bool]:
    """The agent's processed files (narrowed when possible), and whether it has any."""
    narrow = prefilter(pattern)
    if narrow is not None:
        try:
            async with conn.transaction():
                rows = await conn.fetch(
                    _FILES.format(narrow=" AND f.content ~* $2"), agent_id, narrow
                )
        except asyncpg.PostgresError:
            rows = None  # a pattern Postgres reads otherwise: search every file
        if rows is not None:
            if rows:
                return list(rows), True
            has_any = await conn.fetchval(
                "SELECT 1 FROM agent_folders af JOIN folder_files f ON f.folder_id ="
                " af.folder_id WHERE af.agent_id = $1 AND f.status = 'completed' LIMIT 1",
                agent_id,
            )
            return [], bool(has_any)
    rows = await conn.fetch(_FILES.format(narrow=""), agent_id)
    return list(rows), bool(rows)


def grep_lines(
    file_name: str, lines: list[str], regex: re.Pattern[str], context: int, room: int
) -> list[Match]:
    """Matches in one file's numbered lines, at most `room`."""
    found: list[Match] = []
    for i, line in enumerate(lines):
        if len(found) >= room:
            break
        content = line.split(":", 1)[1].strip() if ":" in line else line
        if regex.search(content):
            lo, hi = max(0, i - context), min(len(lines), i + context + 1)
            shown = [f"{'>' if j == i else ' '} {lines[j]}" for j in range(lo, hi)]
            found.append(Match(file_name, i + 1, shown))
    return found


async def grep(conn: asyncpg.Connection, agent_id: str, args: dict[str, Any]) -> str:
    unknown = set(args) - {"pattern", "include", "context_lines", "offset"}
    if unknown:
        raise FileToolError(f"unknown argument(s): {', '.join(sorted(unknown))}")
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern.strip():
        raise FileToolError("Empty search pattern provided")
    pattern = pattern.strip()
    regex = _compiled(pattern, "")
    include = args.get("include")
    if include is not None and not isinstance(include, str):
        raise FileToolError("include must be a string")
    include = include.strip() if include else None
    names = include_regex(include) if include else None
    context = min(max(_int(args, "context_lines", 1) or 0, 0), MAX_CONTEXT_LINES)
    offset = max(_int(args, "offset", 0) or 0, 0)

    rows, any_files = await _grep_files(conn, agent_id, pattern)
    if not any_files:
        return "No files are currently attached to search"
    if names is not None:
        total = len(rows)
        rows = [r for r in rows if names.search(r["file_name"])]
        if not rows and total:
            return f"No files match the filename pattern '{include}' (filtered {total} files)"
    matches: list[Match] = []
    for row in rows:
        lines = numbered(units(row["content"] or "", of_mime(row["file_type"]).view))
        matches += grep_lines(row["file_name"], lines, regex, context, MAX_COLLECTED - len(matches))
        if len(matches) >= MAX_COLLECTED:
            break
    return grep_report(pattern, include, matches, offset)


def grep_report(pattern: str, include: str | None, matches: list[Match], offset: int) -> str:
    if not matches:
        summary = f"No matches found for pattern: '{pattern}'"
        return summary + (f" in files matching '{include}'" if include else "")
    total = len(matches)
    capped = total >= MAX_COLLECTED
    files: dict[str, int] = {}
    for m in matches:
        files[m.file_name] = files.get(m.file_name, 0) + 1
    end = offset + PAGE
    page = matches[offset:end]
    count = f"{MAX_COLLECTED}+" if capped else str(total)
    out = [
        f"Found {count} total matches across {len(files)} files (showing matches"
        f" {offset + 1}-{min(end, total)} of {count})",
        "=" * 80,
        "\nFiles with matches:",
    ]
    for name, n in sorted(files.items(), key=lambda kv: -kv[1]):
        out.append(f"  - {name}: {n}{'+' if capped and n >= MAX_COLLECTED else ''} matches")
    out.append("")
    for m in page:
        out.append(f"\n=== {m.file_name}:{m.line} ===\n" + "\n".join(m.context))
    out.append("")
    if end < total:
        out.append(f'To see more matches, call: grep_files(pattern="{pattern}", offset={end})')
        if capped:
            out.append(
                f"Note: Only the first {MAX_COLLECTED} matches were collected. There may be"
                " more matches beyond this limit."
            )
    elif capped:
        out.append(
            "Showing last page of collected matches. There may be more matches beyond the"
            " collection limit."
        )
    else:
        out.append("No more matches to show.")
    return "\n".join(out)


@dataclass(frozen=True)
class Passage:
    file_name: str
    text: str
    score: float


def nearest_sql(dim: int) -> str:
    """The nearest chunks of the agent's folders by cosine distance: $1 agent, $2 model,
    $3 query vector, $4 limit. The cast and `dim = <literal>` appear literally so the
    planner uses the partial HNSW index (as archival search does)."""
    col = f"c.embedding::vector({dim})" if dim in INDEXED_DIMS else "c.embedding"
    return (
        f"SELECT f.file_name, c.text, 1 - ({col} <=> $3::vector({dim})) AS score"
        " FROM folder_file_chunks c JOIN folder_files f ON f.id = c.file_id"
        f" WHERE c.dim = {dim} AND c.embedding_model = $2 AND c.folder_id IN"
        " (SELECT folder_id FROM agent_folders WHERE agent_id = $1)"
        f" ORDER BY {col} <=> $3::vector({dim}) LIMIT $4"
    )


async def _models(conn: asyncpg.Connection, agent_id: str) -> list[tuple[str, Embedder]]:
    """The embedding models of the agent's processed files, each with its embedder."""
    rows = await conn.fetch(
        "SELECT DISTINCT ON (f.embedding_model) f.embedding_model, fo.embedding_config"
        " FROM agent_folders af JOIN folders fo ON fo.id = af.folder_id"
        " JOIN folder_files f ON f.folder_id = af.folder_id"
        " WHERE af.agent_id = $1 AND f.status = 'completed'",
        agent_id,
    )
    return [(r["embedding_model"], await embedder_for(r["embedding_config"])) for r in rows]


async def semantic(pool: asyncpg.Pool, agent_id: str, args: dict[str, Any]) -> str:
    unknown = set(args) - {"query", "limit"}
    if unknown:
        raise FileToolError(f"unknown argument(s): {', '.join(sorted(unknown))}")
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise FileToolError("Empty search query provided")
    query = query.strip()
    limit = min(max(_int(args, "limit", 5) or 5, 1), MAX_SEMANTIC_RESULTS)
    async with pool.acquire() as conn:
        models = await _models(conn, agent_id)
    found: list[Passage] = []
    for model, embedder in models:
        if embedder.name != model:
            continue  # that model is not available here now
        try:
            (vector,) = await embedder.embed([query])
        except EmbeddingError as exc:
            raise FileToolError(str(exc)) from exc
        async with pool.acquire() as conn, conn.transaction():
            # With the folder filter, keep walking the HNSW graph until enough rows pass.
            await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            rows = await conn.fetch(nearest_sql(len(vector)), agent_id, model, vector, limit)
        found += [Passage(r["file_name"], r["text"], float(r["score"])) for r in rows]
    found = sorted(found, key=lambda p: -p.score)[:limit]
    return semantic_report(query, found)


def semantic_report(query: str, passages: list[Passage]) -> str:
    if not passages:
        return f"No semantic matches found for query: '{query}'"
    by_file: dict[str, list[Passage]] = {}
    for p in passages:
        by_file.setdefault(p.file_name, []).append(p)
    out: list[str] = []
    n = 0
    for name, group in by_file.items():
        for p in group:
            n += 1
            lines = p.text.strip().splitlines()
            shown = [f"  {line}" for line in lines[:20]]
            if len(lines) > 20:
                shown.append(f"  ... [truncated {len(lines) - 20} more lines]")
            out.append(f"\n=== {name} (passage #{n}) ===\n" + "\n".join(shown))
    summary = (
        f"Found {n} semantic matches in {len(by_file)} file{'s' if len(by_file) != 1 else ''}"
        f" for query: '{query}'"
    )
    return "\n".join([summary, "=" * len(summary), *out])
