"""What a run shows of its callback (Letta's Run fields), from projection "callbacks"."""

from __future__ import annotations

from typing import Any

import asyncpg

_FIELDS = (
    "SELECT run_id, callback_sent_at, callback_status_code, callback_error FROM run_callbacks"
    " WHERE run_id = ANY($1::text[])"
)


async def callback_fields(pool: asyncpg.Pool, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Per run that has a delivery: callback_sent_at, callback_status_code, callback_error."""
    if not run_ids:
        return {}
    rows = await pool.fetch(_FIELDS, run_ids)
    return {r["run_id"]: {k: v for k, v in r.items() if k != "run_id"} for r in rows}
