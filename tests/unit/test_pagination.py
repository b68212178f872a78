"""Paging a short list held in memory (an agent's tools and blocks, all tools) by Letta's rules."""

from __future__ import annotations

import pytest

from o_gateway.pagination import Order, page_of

ITEMS = ["a", "b", "c", "d", "e"]


def page(before: str | None, after: str | None, order: Order, limit: int = 10) -> list[str]:
    return page_of(ITEMS, lambda i: i, before, after, order, limit)


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_walking_with_after_yields_every_item_once(order: Order) -> None:
    seen: list[str] = []
    after: str | None = None
    while chunk := page(None, after, order, limit=2):
        seen += chunk
        after = chunk[-1]
    assert seen == (ITEMS if order == "asc" else ITEMS[::-1])


def test_cursors_follow_the_order() -> None:
    assert page(None, "b", "asc") == ["c", "d", "e"]
    assert page(None, "b", "desc") == ["a"]
    assert page("d", None, "asc") == ["a", "b", "c"]
    assert page("d", None, "desc") == ["e"]
    assert page("e", "b", "asc") == ["c", "d"]
    assert page("b", "e", "desc") == ["d", "c"]


def test_a_cursor_naming_nothing_is_ignored() -> None:
    assert page(None, "zz", "asc", limit=2) == ["a", "b"]
    assert page("zz", None, "desc", limit=2) == ["e", "d"]
