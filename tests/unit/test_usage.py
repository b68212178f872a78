"""A run's usage, step by step: the cached share is summed where providers said it (None
only where none did), and read from each provider's response as Letta reads it."""

from __future__ import annotations

from types import SimpleNamespace

from o_contracts.models import Usage
from o_executor.llm import openai_usage


def test_cached_counts_add_up_where_any_step_had_them() -> None:
    plain = Usage(prompt_tokens=10, completion_tokens=2, total_tokens=12)
    assert (plain + plain).cached_input_tokens is None
    cached = Usage(prompt_tokens=10, total_tokens=10, cached_input_tokens=8, cache_write_tokens=2)
    total = plain + cached + cached
    assert (total.prompt_tokens, total.cached_input_tokens, total.cache_write_tokens) == (30, 16, 4)


def test_an_openai_responses_cached_tokens_are_its_cached_input() -> None:
    details = SimpleNamespace(cached_tokens=1152)
    usage = SimpleNamespace(
        prompt_tokens=1500, completion_tokens=7, total_tokens=1507, prompt_tokens_details=details
    )
    assert openai_usage(usage) == Usage(
        prompt_tokens=1500, completion_tokens=7, total_tokens=1507, cached_input_tokens=1152
    )
    bare = SimpleNamespace(prompt_tokens=3, completion_tokens=1, total_tokens=4)
    assert openai_usage(bare).cached_input_tokens is None
    assert openai_usage(None) == Usage()
