"""Tool search ranks by the query's words (BM25 over name, description, tags); tool filters
keep what Letta's list, count and search keep."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import HTTPException

from o_gateway.tool_filters import ToolFilter, split
from o_gateway.tool_search import ranked, words


def tool(name: str, description: str = "", tags: list[str] | None = None, **extra: Any) -> dict:
    return {"id": f"tool-{name}", "name": name, "description": description, "tags": tags, **extra}


TOOLS = [
    tool("get_weather", "Get the current weather for a city.", ["weather"]),
    tool("stock_quote", "Look up a stock's price."),
    tool("send_email", "Send an email to a person."),
    tool("core_memory_append", "Append to a memory block.", tool_type="letta_core"),
]


def test_names_split_into_words_whatever_their_case() -> None:
    assert words("getWeather_now") == ["get", "weather", "now"]
    assert words("Stock's PRICE!") == ["stock", "s", "price"]


def test_the_tool_sharing_most_query_words_ranks_first() -> None:
    found = ranked(TOOLS, "what is the weather in Paris")
    assert [t["name"] for t, _ in found] == ["get_weather"]
    found = ranked(TOOLS, "email the stock price")
    assert [t["name"] for t, _ in found] == ["stock_quote", "send_email"]
    assert found[0][1] > found[1][1] > 0


def test_a_query_no_tool_shares_a_word_with_finds_nothing() -> None:
    assert ranked(TOOLS, "zebra") == []
    assert ranked(TOOLS, "!!!") == []
    assert ranked(TOOLS, "what is the") == []  # only words that say nothing
    assert ranked([], "weather") == []


def test_filters_keep_what_letta_keeps() -> None:
    def names(f: ToolFilter) -> list[str]:
        return [t["name"] for t in f.apply(TOOLS)]

    assert names(ToolFilter.of(search="MAIL")) == ["send_email"]
    assert names(ToolFilter.of(types=["letta_core"])) == ["core_memory_append"]
    assert names(ToolFilter.of(only_letta=True)) == ["core_memory_append"]
    assert len(names(ToolFilter.of(exclude_letta=True))) == 3
    assert names(ToolFilter.of(exclude_types=["custom"])) == ["core_memory_append"]
    assert names(ToolFilter.of(tags=["weather"])) == ["get_weather"]
    assert names(ToolFilter.of(tool_ids=["tool-stock_quote, tool-send_email"])) == [
        "stock_quote",
        "send_email",
    ]
    assert names(ToolFilter.of(name="send_email", names=["stock_quote"])) == [
        "stock_quote",
        "send_email",
    ]


def test_comma_separated_and_repeated_values_are_one_list() -> None:
    assert split(["a,b", " c ", ",", "d"]) == ["a", "b", "c", "d"]
    assert split(None) == []


def test_an_unknown_tool_type_is_400() -> None:
    with pytest.raises(HTTPException) as caught:
        ToolFilter.of(types=["nope"])
    assert caught.value.status_code == 400
    assert str(caught.value.detail).startswith("Invalid tool_type 'nope'. Must be one of:")
