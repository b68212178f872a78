"""A step's prompt cache in its provider's words, as Letta's steps show it."""

from __future__ import annotations

from o_gateway.routes.runs import prompt_tokens_details


def test_openai_says_cached_tokens() -> None:
    row = {"cached_input_tokens": 1152, "cache_write_tokens": None}
    assert prompt_tokens_details(row, "openai") == {
        "cached_tokens": 1152,
        "cache_read_tokens": None,
        "cache_creation_tokens": None,
    }


def test_anthropic_says_what_it_read_and_wrote() -> None:
    row = {"cached_input_tokens": 0, "cache_write_tokens": 2048}
    assert prompt_tokens_details(row, "anthropic") == {
        "cached_tokens": None,
        "cache_read_tokens": 0,
        "cache_creation_tokens": 2048,
    }


def test_a_provider_that_said_nothing_leaves_it_empty() -> None:
    assert prompt_tokens_details({"cached_input_tokens": None}, "openai") == {}
    # (A step projected before the columns were.)
    assert prompt_tokens_details({}, "anthropic") == {}
