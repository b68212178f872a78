"""Which archival scopes are read rather than searched through the HNSW index."""

from __future__ import annotations

from o_memory.archival import EXACT_UP_TO, reads_scope


def test_a_small_scope_of_a_large_table_is_read() -> None:
    assert reads_scope(2_000, 122_000)
    assert reads_scope(EXACT_UP_TO, 122_000)


def test_a_large_scope_or_most_of_the_table_goes_through_the_index() -> None:
    assert not reads_scope(EXACT_UP_TO + 1, 1_000_000)
    # (10k of 11k: the index finds them in a quarter of the time reading takes.)
    assert not reads_scope(10_000, 11_000)
    # Every passage, and a table Postgres has not counted yet (-1).
    assert not reads_scope(None, 1_000_000)
    assert not reads_scope(10, -1)
