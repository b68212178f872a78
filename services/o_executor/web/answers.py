"""What the model is given back, in the shapes Letta's web tools give it. Pure: no I/O.

A search's results and a page read through Exa are JSON (Letta's fields); a page O
fetched itself is its markdown text. Whatever it is, it is cut at the operator's limit
with a note saying so, so one huge page cannot fill the context window.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Found:
    """One search result, or one page's contents, as Exa gave it."""

    title: str | None
    url: str | None
    published_date: str | None = None
    author: str | None = None
    text: str | None = None
    highlights: list[str] = field(default_factory=list)
    summary: str | None = None


def empty_query(query: str) -> str:
    return json.dumps({"error": "Query cannot be empty", "query": query})


def search_failed(query: str, reason: str) -> str:
    return json.dumps({"query": query, "error": f"Search failed: {reason}"})


def search_results(query: str, found: list[Found], include_text: bool) -> str:
    results = []
    for f in found:
        result: dict[str, Any] = {
            "title": f.title,
            "url": f.url,
            "published_date": f.published_date,
            "author": f.author,
        }
        if include_text and f.text:
            result["text"] = f.text
        if f.highlights:
            result["highlights"] = f.highlights
        if f.summary:
            result["summary"] = f.summary
        results.append(result)
    return json.dumps({"query": query, "results": results}, indent=2, ensure_ascii=False)


def page_contents(found: Found) -> str:
    return json.dumps(
        {
            "title": found.title,
            "published_date": found.published_date,
            "author": found.author,
            "text": found.text,
        }
    )


def clipped(answer: str, max_chars: int) -> str:
    """`answer`, or its first `max_chars` characters and a note of how much was left out."""
    if len(answer) <= max_chars:
        return answer
    return f"{answer[:max_chars]}\n\n[cut: {len(answer) - max_chars} more characters not shown]"
