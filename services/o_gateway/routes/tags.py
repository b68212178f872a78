"""`GET /v1/tags/`: every tag on an agent or a block, in name order, paged by tag."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from o_gateway.routes.paths import route
from o_gateway.state import GW

router = APIRouter()


@route(router, "GET", "/v1/tags/")
async def list_tags(
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "asc",
    order_by: Literal["name"] = "name",
    name: str | None = None,
    query_text: str | None = None,
) -> list[str]:
    """The cursors are tags themselves: `after` is further along in `order`, and a
    tag that no longer exists still marks its place. `name` (or the older
    `query_text`) keeps tags containing it, ignoring case."""
    ahead, behind = (">", "<") if order == "asc" else ("<", ">")
    where, args = ["true"], []
    for clause, value in (
        ("tag ILIKE '%' || ${} || '%'", name or query_text),
        (f"tag {ahead} ${{}}", after),
        (f"tag {behind} ${{}}", before),
    ):
        if value:
            args.append(value)
            where.append(clause.format(len(args)))
    # Byte order ("C"), as Letta sorts and compares its tags in Python.
    rows = await gw.pool.fetch(
        'SELECT tag FROM (SELECT unnest(tags) COLLATE "C" AS tag FROM agents'
        ' UNION SELECT unnest(tags) COLLATE "C" FROM blocks) t'
        f" WHERE {' AND '.join(where)} ORDER BY tag {order.upper()} LIMIT {limit}",
        *args,
    )
    return [r["tag"] for r in rows]
