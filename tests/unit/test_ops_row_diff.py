"""How `o_ops projections verify` names what differs between live rows and the log's."""

from __future__ import annotations

from o_ops.row_diff import RowDifference, differences


def test_rows_with_one_key_on_both_sides_are_one_change_naming_its_columns() -> None:
    live = [{"id": "b1", "value": "edited by hand", "limit": 10}]
    log = [{"id": "b1", "value": "Name: Sam", "limit": 10}]
    (found,) = differences(live, log, ["id"])
    assert found == RowDifference(
        "changed", {"id": "b1"}, {"value": ("edited by hand", "Name: Sam")}
    )
    assert found.describe("blocks") == (
        'blocks (id=b1): value: live "edited by hand" but the log gives "Name: Sam"'
    )


def test_a_row_on_one_side_only_is_extra_or_missing() -> None:
    found = differences([{"id": "x", "v": 1}], [{"id": "y", "v": 1}], ["id"])
    assert [(d.kind, d.key) for d in found] == [
        ("live_only", {"id": "x"}),
        ("log_only", {"id": "y"}),
    ]
    assert found[0].describe("t") == "t (id=x): in the live table, not made by the log"
    assert found[1].describe("t") == "t (id=y): made by the log, missing from the live table"


def test_composite_keys_pair_rows_and_a_table_without_a_key_shows_whole_rows() -> None:
    live = [{"block_id": "b", "version": 2, "value": "a"}]
    log = [
        {"block_id": "b", "version": 2, "value": "b"},
        {"block_id": "b", "version": 3, "value": "c"},
    ]
    found = differences(live, log, ["block_id", "version"])
    assert [(d.kind, d.key) for d in found] == [
        ("changed", {"block_id": "b", "version": 2}),
        ("log_only", {"block_id": "b", "version": 3}),
    ]
    keyless = differences([{"a": 1}], [], [])
    assert [(d.kind, d.key) for d in keyless] == [("live_only", {"a": 1})]


def test_nothing_on_either_side_is_no_difference() -> None:
    assert differences([], [], ["id"]) == []
