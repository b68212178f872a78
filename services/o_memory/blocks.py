"""The columns of the memory projection's `blocks` table, as decisions read them."""

from __future__ import annotations

BLOCK_COLUMNS = (
    'id, label, value, "limit", description, read_only, metadata, tags, version,'
    " created_at, updated_at, last_seq"
)
