"""The gateway's read model of the tool registry (projection "tools")."""

from __future__ import annotations

import asyncpg

from o_contracts import subjects
from o_contracts.events import ToolCreated, ToolDeleted, ToolUpdated
from o_contracts.projection_names import TOOLS
from o_runtime.eventlog import Recorded
from o_runtime.projector import Projection, assignments

tools = Projection(name=TOOLS, filter_subject=subjects.TOOL_EVENTS, tables=["tools"])

# ToolUpdated.changes key -> column.
COLUMNS = (
    "name",
    "description",
    "source_type",
    "source_code",
    "json_schema",
    "tags",
    "return_char_limit",
    "default_requires_approval",
    "idempotent",
    "metadata",
    "pip_requirements",
)


@tools.on(ToolCreated)
async def tool_created(conn: asyncpg.Connection, e: ToolCreated, rec: Recorded) -> None:
    await conn.execute(
        "INSERT INTO tools (id, name, description, source_type, source_code, json_schema, tags,"
        " return_char_limit, default_requires_approval, idempotent, metadata, created_at,"
        " updated_at, last_seq, pip_requirements)"
        " VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$12,$13,$14)"
        " ON CONFLICT (id) DO NOTHING",
        e.tool_id,
        e.name,
        e.description,
        e.source_type,
        e.source_code,
        e.json_schema,
        e.tags,
        e.return_char_limit,
        e.default_requires_approval,
        e.idempotent,
        e.metadata,
        rec.envelope.time,
        rec.seq,
        [r.model_dump() for r in e.pip_requirements],
    )


@tools.on(ToolUpdated)
async def tool_updated(conn: asyncpg.Connection, e: ToolUpdated, rec: Recorded) -> None:
    # (An update that changed nothing, an import's override recorded for its retry's sake,
    # leaves `updated_at` as it was.)
    args: list[object] = [e.tool_id, rec.seq]
    if e.changes:
        args.append(rec.envelope.time)
    touched = ", updated_at = $3" if e.changes else ""
    await conn.execute(
        f"UPDATE tools SET last_seq = $2{touched}{assignments(e.changes, COLUMNS, args)}"
        " WHERE id = $1",
        *args,
    )


@tools.on(ToolDeleted)
async def tool_deleted(conn: asyncpg.Connection, e: ToolDeleted, rec: Recorded) -> None:
    await conn.execute("DELETE FROM tools WHERE id = $1", e.tool_id)
