"""A web tool call's arguments, checked and typed. Pure: no I/O here.

The model writes the arguments, so anything may arrive: a wrong type is refused with a
reason the model can act on (BadArguments); what Letta clamps (a result count out of
1..100) is clamped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from o_contracts.base_tools import SCHEMAS

CATEGORIES = frozenset(SCHEMAS["web_search"]["parameters"]["properties"]["category"]["enum"])
DEFAULT_RESULTS = 10
MAX_RESULTS = 100


class BadArguments(ValueError):
    """The call's arguments cannot be used; the message says why."""


@dataclass(frozen=True)
class SearchRequest:
    query: str
    num_results: int = DEFAULT_RESULTS
    category: str | None = None
    include_text: bool = False
    include_domains: tuple[str, ...] = ()
    exclude_domains: tuple[str, ...] = ()
    start_published_date: str | None = None
    end_published_date: str | None = None
    user_location: str | None = None


@dataclass(frozen=True)
class FetchRequest:
    url: str


def search_request(args: dict[str, Any]) -> SearchRequest:
    query = _text(args, "query", required=True) or ""
    count = args.get("num_results")
    if count is None:
        count = DEFAULT_RESULTS
    if isinstance(count, bool) or not isinstance(count, int | float):
        raise BadArguments("num_results must be a number")
    category = _text(args, "category")
    if category is not None and category not in CATEGORIES:
        raise BadArguments(f"category must be one of: {', '.join(sorted(CATEGORIES))}")
    include_text = args.get("include_text", False)
    if not isinstance(include_text, bool):
        raise BadArguments("include_text must be true or false")
    return SearchRequest(
        query=query,
        num_results=min(max(int(count), 1), MAX_RESULTS),
        category=category,
        include_text=include_text,
        include_domains=_texts(args, "include_domains"),
        exclude_domains=_texts(args, "exclude_domains"),
        start_published_date=_text(args, "start_published_date"),
        end_published_date=_text(args, "end_published_date"),
        user_location=_text(args, "user_location"),
    )


def fetch_request(args: dict[str, Any]) -> FetchRequest:
    url = (_text(args, "url", required=True) or "").strip()
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        # Letta's words: the model learns a file path is no web page.
        raise BadArguments(
            f"Invalid URL scheme '{parts.scheme}'. Only 'http' and 'https' URLs are supported."
            " Local file paths (file://) and other protocols cannot be fetched."
        )
    if not parts.hostname:
        raise BadArguments(f"'{url}' has no host to fetch from")
    return FetchRequest(url)


def _text(args: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    value = args.get(name)
    if value is None:
        if required:
            raise BadArguments(f"{name} is required")
        return None
    if not isinstance(value, str):
        raise BadArguments(f"{name} must be a string")
    return value


def _texts(args: dict[str, Any], name: str) -> tuple[str, ...]:
    value = args.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadArguments(f"{name} must be a list of strings")
    return tuple(value)
