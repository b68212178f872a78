"""A block value's change as one span (BlockUpdated v2): between() then applied_to() is identity."""

from __future__ import annotations

import random

import pytest

from o_contracts.envelope import Envelope, decode
from o_contracts.events import BlockUpdated
from o_contracts.events.blocks import ValueEdit


@pytest.mark.parametrize(
    ("old", "new", "edit"),
    [
        ("abc", "abcdef", (3, 0, "def")),
        ("abc", "xabc", (0, 0, "x")),
        ("a-c", "a+c", (1, 1, "+")),
        ("same", "same", (4, 0, "")),
        ("aaaa", "aa", (2, 2, "")),
        ("", "new", (0, 0, "new")),
        ("gone", "", (0, 4, "")),
        ("ü→✓", "ü→→✓", (2, 0, "→")),
    ],
)
def test_the_span_is_the_smallest_one(old: str, new: str, edit: tuple[int, int, str]) -> None:
    span = ValueEdit.between(old, new)
    assert (span.at, span.delete, span.insert) == edit
    assert span.applied_to(old) == new


def test_between_then_applied_is_the_new_value() -> None:
    rng = random.Random(7)
    alphabet = "ab ✓\n"
    for _ in range(2000):
        old = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        new = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert ValueEdit.between(old, new).applied_to(old) == new


def test_a_v1_block_update_is_read_as_v2() -> None:
    v1 = Envelope.wrap(
        BlockUpdated(block_id="block-1", version=2, changes={"value": "whole"}),
        aggregate_id="block-1",
        producer="memory",
    ).model_copy(update={"schema_version": 1})
    read = decode(v1.encode())
    assert read.schema_version == 2
    assert isinstance(read.data, BlockUpdated)
    assert read.data.changes == {"value": "whole"} and read.data.value_edit is None
