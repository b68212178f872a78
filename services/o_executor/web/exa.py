"""Exa's search and contents, through its SDK (exa-py's AsyncExa, over httpx).

Failures come back as ExaFailed with the SDK's or the server's reason: web_search tells
the model (Letta's "Search failed: ..."), fetch_webpage falls back to fetching the page
itself.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Iterable
from typing import Any

from o_executor.web.answers import Found
from o_executor.web.requests import SearchRequest


class ExaFailed(Exception):
    """Exa answered with an error, or could not be reached."""


async def search(
    request: SearchRequest, api_key: str, base_url: str, timeout: float
) -> list[Found]:
    """The results of `request`, each with its highlights, summary and (if asked) text."""
    options: dict[str, Any] = {
        "num_results": request.num_results,
        "type": "auto",
        "category": request.category,
        "include_domains": list(request.include_domains) or None,
        "exclude_domains": list(request.exclude_domains) or None,
        "start_published_date": request.start_published_date,
        "end_published_date": request.end_published_date,
        "user_location": request.user_location,
    }
    contents: dict[str, Any] = {
        "highlights": {"query": request.query},
        "summary": {"query": f"What this page says about: {request.query}"},
    }
    if request.include_text:
        contents["text"] = True
    async with await _client(api_key, base_url, timeout) as exa:
        try:
            response = await exa.search(
                request.query,
                contents=contents,
                **{k: v for k, v in options.items() if v is not None},
            )
        except Exception as exc:  # the SDK raises its own and httpx's errors
            raise ExaFailed(_reason(exc)) from exc
    return _found(response.results)


async def contents(url: str, api_key: str, base_url: str, timeout: float) -> Found | None:
    """The page's text as Exa has it (None: Exa has nothing for it)."""
    async with await _client(api_key, base_url, timeout) as exa:
        try:
            response = await exa.get_contents([url], text=True)
        except Exception as exc:
            raise ExaFailed(_reason(exc)) from exc
    found = _found(response.results)
    return found[0] if found else None


async def _client(api_key: str, base_url: str, timeout: float) -> Any:
    # The SDK loads when a web tool is first used, not at start, and in a thread: it takes
    # a quarter of a second, which the executor's other runs should not wait out.
    sdk = await asyncio.to_thread(importlib.import_module, "exa_py")
    return sdk.AsyncExa(api_key=api_key, api_base=base_url, timeout=timeout)


def _found(results: Iterable[Any]) -> list[Found]:
    return [
        Found(
            title=getattr(r, "title", None),
            url=getattr(r, "url", None),
            published_date=getattr(r, "published_date", None),
            author=getattr(r, "author", None),
            text=getattr(r, "text", None),
            highlights=list(getattr(r, "highlights", None) or []),
            summary=getattr(r, "summary", None),
        )
        for r in results
    ]


def _reason(exc: Exception) -> str:
    return (str(exc) or type(exc).__name__)[:500]
