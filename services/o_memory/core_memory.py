"""An agent's core memory as a prompt shows it: its blocks and what its archive holds.

Read straight from the memory service's projection (`blocks`, `agent_blocks`,
`passages`) by whoever compiles a prompt, as the gateway reads it for
`GET .../core-memory`: the executor reads it for every run, where a NATS
request to the memory service cost two more process hops and two more
queries (profiled: ~1.8 ms of a 1-step run waited on it). The memory
service's core-memory RPC answers other systems with the same read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

import asyncpg

# The block fields a prompt (and the core-memory RPC) carries.
BLOCK_FIELDS = (
    "id",
    "label",
    "value",
    "limit",
    "description",
    "read_only",
    "metadata",
    "tags",
    "version",
    "last_seq",
)

# The agent's folders in attach order, each with its processed files and the window of
# those it has open (o_contracts/directories.py renders them); [] for most agents (one
# index lookup).
_DIRECTORIES = (
    "coalesce((SELECT jsonb_agg(jsonb_build_object('name', fo.name, 'description',"
    " fo.description, 'instructions', fo.instructions, 'files', coalesce((SELECT"
    " jsonb_agg(jsonb_build_object('name', f.file_name, 'open', v.file_id IS NOT NULL,"
    " 'visible', v.visible_content) ORDER BY f.file_name, f.id) FROM folder_files f"
    " LEFT JOIN agent_file_views v ON v.file_id = f.id AND v.agent_id = $1"
    " WHERE f.folder_id = af.folder_id AND f.status = 'completed'), '[]'::jsonb))"
    " ORDER BY af.attached_seq) FROM agent_folders af JOIN folders fo ON fo.id = af.folder_id"
    " WHERE af.agent_id = $1), '[]'::jsonb)"
)

# Whose passages are the agent's archival memory: its own, and its archives' (the counts
# are kept by owner: an agent, or an archive).
# (As one array, so that each count is an index lookup whatever the table's size.)
_OWNERS = (
    "agent_id = ANY(array_prepend($1::text,"
    " ARRAY(SELECT archive_id FROM archive_agents WHERE agent_id = $1)))"
)

# The agent's core memory as one jsonb value ($1: the agent's id): its blocks in order, the
# archive's size and tags, its folders. The archival projection keeps the size and tags
# (counting passages here grew with the archive, on every run). One value rather than a
# row per block, so that a larger read can carry it as a column: the executor reads an
# agent and its core memory in one round trip (ExecutorService.load_agent_and_core).
CORE_MEMORY_JSON = (
    "jsonb_build_object('blocks', coalesce((SELECT jsonb_agg(jsonb_build_object("
    + ", ".join(f"'{f}', b.\"{f}\"" for f in BLOCK_FIELDS)
    + ") ORDER BY ab.position, b.id) FROM agent_blocks ab JOIN blocks b ON b.id = ab.block_id"
    " WHERE ab.agent_id = $1), '[]'::jsonb),"
    f" 'archival_count', coalesce((SELECT sum(passages) FROM archival_counts WHERE {_OWNERS}), 0),"
    " 'archival_tags', coalesce((SELECT to_jsonb(array_agg(DISTINCT tag ORDER BY tag))"
    f" FROM archival_tag_counts WHERE {_OWNERS}), '[]'::jsonb),"
    f" 'directories', {_DIRECTORIES})"
)
_CORE_MEMORY = f"SELECT {CORE_MEMORY_JSON}"


class CoreMemory(TypedDict):
    blocks: list[dict[str, Any]]
    archival_count: int
    archival_tags: list[str]
    # The agent's folders and files (the prompt's <directories>); absent: none.
    directories: NotRequired[list[dict[str, Any]]]


_ISOLATED = (
    "SELECT " + ", ".join(f'"{f}"' for f in BLOCK_FIELDS) + " FROM blocks WHERE id = ANY($1)"
)


async def read_core_memory(
    pool: asyncpg.Pool | asyncpg.Connection, agent_id: str, isolated: Sequence[str] = ()
) -> CoreMemory:
    """The agent's core memory; with `isolated` (a conversation's own blocks), those take
    the place of the agent's blocks with the same labels."""
    return await with_isolated(
        pool, core_memory(await pool.fetchval(_CORE_MEMORY, agent_id)), isolated
    )


def core_memory(value: dict[str, Any]) -> CoreMemory:
    """Core memory from CORE_MEMORY_JSON's value (each block's fields in BLOCK_FIELDS'
    order, as the prompt and the core-memory RPC have always had them: jsonb keeps its
    own)."""
    return {
        "blocks": [{f: b[f] for f in BLOCK_FIELDS} for b in value["blocks"]],
        "archival_count": int(value["archival_count"]),
        "archival_tags": list(value["archival_tags"]),
        "directories": list(value["directories"]),
    }


async def with_isolated(
    pool: asyncpg.Pool | asyncpg.Connection, core: CoreMemory, isolated: Sequence[str]
) -> CoreMemory:
    """`core` with a conversation's own blocks (`isolated`) in the place of the agent's
    blocks with the same labels."""
    if not isolated:
        return core
    own = {
        r["label"]: {f: r[f] for f in BLOCK_FIELDS}
        for r in await pool.fetch(_ISOLATED, list(isolated))
    }
    return {**core, "blocks": [own.get(b["label"], b) for b in core["blocks"]]}
