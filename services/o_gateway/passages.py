"""An archival passage as Letta's API shows it (an agent's archival memory, an archive's)."""

from __future__ import annotations

from typing import Any

from o_gateway.render import ORGANIZATION_ID

# What `passage` reads of a `passages` row.
PASSAGE_COLUMNS = (
    "id, agent_id, archive_id, text, tags, importance, importance_source, kind, sources,"
    " embedding_model, created_at, last_accessed_at, metadata"
)


def passage(row: dict[str, Any], embedding_config: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": row["id"],
        "text": row["text"],
        "tags": list(row["tags"]),
        "created_at": _iso(row["created_at"]),
        "updated_at": _iso(row["created_at"]),
        "agent_id": row["agent_id"],
        "archive_id": row.get("archive_id"),
        "source_id": None,
        "file_id": None,
        "file_name": None,
        "is_deleted": False,
        "organization_id": ORGANIZATION_ID,
        "embedding": None,
        "embedding_config": embedding_config,
        "created_by_id": None,
        "last_updated_by_id": None,
        # O's own figures, and the client's metadata over them (a passage put in an archive).
        "metadata": {
            "importance": row["importance"],
            "importance_source": row["importance_source"],
            "kind": row["kind"],
            "sources": list(row["sources"]),
            "embedding_model": row["embedding_model"],
            "last_accessed_at": _iso(row["last_accessed_at"]),
        }
        | (row.get("metadata") or {}),
    }


def _iso(value: Any) -> str:
    return value if isinstance(value, str) else str(value.isoformat())
