"""Reads of O's API for the checks and snapshots: retried while the system settles, paginated."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


class ReadFailed(RuntimeError):
    pass


async def get_json(
    http: httpx.AsyncClient, path: str, params: dict[str, Any] | None = None, tries: int = 10
) -> Any:
    """GET, retried on a transport error or 5xx (the system may still be recovering)."""
    last = ""
    for attempt in range(tries):
        try:
            response = await http.get(path, params=params, timeout=30)
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            if response.status_code == 200:
                return response.json()
            last = f"{response.status_code} {response.text[:200]}"
            if response.status_code < 500:
                break
        await asyncio.sleep(min(0.2 * 2**attempt, 3.0))
    raise ReadFailed(f"GET {path} {params or ''}: {last}")


async def paginate(
    http: httpx.AsyncClient,
    path: str,
    params: dict[str, Any] | None = None,
    limit: int = 1000,
    *,
    until_empty: bool = False,
) -> list[dict[str, Any]]:
    """Every item of a keyset-paginated list, oldest first (`order=asc`, `after=<last id>`).

    `until_empty` for lists whose rows may render as more or fewer items than the limit counts
    (an agent's messages): then only an empty page ends the walk.
    """
    items: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        query = {**(params or {}), "order": "asc", "limit": limit}
        if after is not None:
            query["after"] = after
        page = await get_json(http, path, query)
        if not isinstance(page, list):
            raise ReadFailed(f"GET {path}: not a list")
        items += page
        short = len(page) < limit and not until_empty
        if short or not page or page[-1].get("id") in (None, after):
            return items
        after = page[-1]["id"]
