"""Core-memory tool semantics: each tool's result and each error a model may see."""

from __future__ import annotations

from typing import Any

import pytest

from o_memory.tools import EDITS, BlockView, MemoryToolError, apply_edit


def view(value: str = "", *, label: str = "human", limit: int = 1000, read_only: bool = False):
    return BlockView(label=label, value=value, limit=limit, read_only=read_only)


def edit(tool: str, block: BlockView, **args: Any) -> str:
    return apply_edit(tool, block, args)


def error(tool: str, block: BlockView, **args: Any) -> str:
    with pytest.raises(MemoryToolError) as exc:
        apply_edit(tool, block, args)
    return str(exc.value)


def test_memory_tool_error_is_value_error() -> None:
    assert issubclass(MemoryToolError, ValueError)


def test_edits_registry_names() -> None:
    assert set(EDITS) == {
        "core_memory_append",
        "core_memory_replace",
        "memory_replace",
        "memory_insert",
        "memory_rethink",
        "memory_apply_patch",
    }


def test_unknown_tool() -> None:
    assert error("send_message", view("x"), message="hi") == "'send_message' is not a memory tool"


# -- core_memory_append ----------------------------------------------------


def test_append_to_empty_block_has_no_leading_newline() -> None:
    assert edit("core_memory_append", view(""), content="Name: Ada") == "Name: Ada"


def test_append_to_non_empty_block_adds_a_newline() -> None:
    assert edit("core_memory_append", view("Name: Ada"), content="Likes: tea") == (
        "Name: Ada\nLikes: tea"
    )


def test_append_keeps_existing_trailing_newline() -> None:
    assert edit("core_memory_append", view("a\n"), content="b") == "a\n\nb"


def test_append_missing_content() -> None:
    assert error("core_memory_append", view("x")) == "missing required argument 'content'"


def test_append_non_string_content() -> None:
    assert error("core_memory_append", view("x"), content=5) == (
        "argument 'content' must be a string"
    )


# -- core_memory_replace ---------------------------------------------------


def test_core_replace_replaces_every_occurrence() -> None:
    block = view("cat likes cat food")
    assert edit("core_memory_replace", block, old_content="cat", new_content="dog") == (
        "dog likes dog food"
    )


def test_core_replace_with_empty_new_content_deletes() -> None:
    block = view("Name: Ada\nLikes: tea")
    assert edit("core_memory_replace", block, old_content="\nLikes: tea", new_content="") == (
        "Name: Ada"
    )


def test_core_replace_not_found_names_content_and_label() -> None:
    msg = error(
        "core_memory_replace", view("Name: Ada"), old_content="Name: Bob", new_content="Name: Cy"
    )
    assert msg == "Old content 'Name: Bob' not found in memory block 'human'"


def test_core_replace_is_case_sensitive() -> None:
    msg = error("core_memory_replace", view("Ada"), old_content="ada", new_content="x")
    assert msg == "Old content 'ada' not found in memory block 'human'"


def test_core_replace_empty_old() -> None:
    msg = error("core_memory_replace", view("Ada"), old_content="", new_content="x")
    assert msg == "old_content must not be empty"


def test_core_replace_missing_old() -> None:
    msg = error("core_memory_replace", view("Ada"), new_content="x")
    assert msg == "missing required argument 'old_content'"


def test_core_replace_non_string_new() -> None:
    msg = error("core_memory_replace", view("Ada"), old_content="Ada", new_content=["x"])
    assert msg == "argument 'new_content' must be a string"


# -- memory_replace --------------------------------------------------------


def test_memory_replace_exactly_once() -> None:
    block = view("Name: Ada\nLikes: tea")
    assert edit("memory_replace", block, old_string="tea", new_string="coffee") == (
        "Name: Ada\nLikes: coffee"
    )


def test_memory_replace_with_empty_new_string_deletes() -> None:
    assert edit("memory_replace", view("a b c"), old_string=" b", new_string="") == "a c"


def test_memory_replace_zero_occurrences() -> None:
    msg = error("memory_replace", view("Name: Ada"), old_string="Bob", new_string="Cy")
    assert msg == (
        "No replacement was performed: old_string 'Bob' did not appear verbatim "
        "in memory block 'human'"
    )


def test_memory_replace_several_occurrences() -> None:
    msg = error("memory_replace", view("tea, tea, tea"), old_string="tea", new_string="x")
    assert msg == (
        "No replacement was performed: old_string 'tea' appears 3 times in memory block "
        "'human'; make it unique by including more context"
    )


def test_memory_replace_two_occurrences_count() -> None:
    msg = error("memory_replace", view("ab ab", label="persona"), old_string="ab", new_string="x")
    assert "appears 2 times in memory block 'persona'" in msg


def test_memory_replace_empty_old() -> None:
    msg = error("memory_replace", view("x"), old_string="", new_string="y")
    assert msg == "old_string must not be empty"


def test_memory_replace_missing_old() -> None:
    assert error("memory_replace", view("x"), new_string="y") == (
        "missing required argument 'old_string'"
    )


# -- memory_insert ---------------------------------------------------------

THREE = "one\ntwo\nthree"


def test_insert_default_appends_at_end() -> None:
    assert edit("memory_insert", view(THREE), new_string="four") == "one\ntwo\nthree\nfour"


def test_insert_minus_one_appends_at_end() -> None:
    assert edit("memory_insert", view(THREE), new_string="four", insert_line=-1) == (
        "one\ntwo\nthree\nfour"
    )


def test_insert_zero_inserts_at_beginning() -> None:
    assert edit("memory_insert", view(THREE), new_string="zero", insert_line=0) == (
        "zero\none\ntwo\nthree"
    )


def test_insert_middle_goes_after_that_many_lines() -> None:
    assert edit("memory_insert", view(THREE), new_string="1.5", insert_line=1) == (
        "one\n1.5\ntwo\nthree"
    )
    assert edit("memory_insert", view(THREE), new_string="2.5", insert_line=2) == (
        "one\ntwo\n2.5\nthree"
    )


def test_insert_at_line_count_is_the_end() -> None:
    assert edit("memory_insert", view(THREE), new_string="four", insert_line=3) == (
        "one\ntwo\nthree\nfour"
    )


def test_insert_multiline_text() -> None:
    assert edit("memory_insert", view(THREE), new_string="a\nb", insert_line=1) == (
        "one\na\nb\ntwo\nthree"
    )


def test_insert_into_empty_block() -> None:
    assert edit("memory_insert", view(""), new_string="first") == "first"
    assert edit("memory_insert", view(""), new_string="first", insert_line=0) == "first"


def test_insert_out_of_range_above() -> None:
    msg = error("memory_insert", view(THREE), new_string="x", insert_line=4)
    assert msg == (
        "insert_line 4 is out of range: memory block 'human' has 3 lines "
        "(valid: 0..3, or -1 for the end)"
    )


def test_insert_out_of_range_negative() -> None:
    msg = error("memory_insert", view(THREE), new_string="x", insert_line=-2)
    assert msg == (
        "insert_line -2 is out of range: memory block 'human' has 3 lines "
        "(valid: 0..3, or -1 for the end)"
    )


def test_insert_out_of_range_on_empty_block() -> None:
    msg = error("memory_insert", view("", label="notes"), new_string="x", insert_line=1)
    assert msg == (
        "insert_line 1 is out of range: memory block 'notes' has 0 lines "
        "(valid: 0..0, or -1 for the end)"
    )


@pytest.mark.parametrize("line", ["1", 1.0, None, [1]])
def test_insert_non_int_line(line: Any) -> None:
    msg = error("memory_insert", view(THREE), new_string="x", insert_line=line)
    assert msg == "insert_line must be an integer (-1 appends at the end)"


@pytest.mark.parametrize("line", [True, False])
def test_insert_bool_line_is_refused(line: bool) -> None:
    msg = error("memory_insert", view(THREE), new_string="x", insert_line=line)
    assert msg == "insert_line must be an integer (-1 appends at the end)"


def test_insert_missing_new_string() -> None:
    assert error("memory_insert", view(THREE), insert_line=0) == (
        "missing required argument 'new_string'"
    )


# -- memory_rethink --------------------------------------------------------


def test_rethink_replaces_whole_value() -> None:
    assert edit("memory_rethink", view("old\nstuff"), new_memory="brand new") == "brand new"


def test_rethink_to_empty_string_clears() -> None:
    assert edit("memory_rethink", view("old"), new_memory="") == ""


def test_rethink_non_string() -> None:
    assert error("memory_rethink", view("old"), new_memory={"a": 1}) == (
        "argument 'new_memory' must be a string"
    )


@pytest.mark.parametrize(
    ("tool", "args", "missing"),
    [
        ("memory_rethink", {}, "new_memory"),
        ("core_memory_replace", {"old_content": "Ada"}, "new_content"),
        ("memory_replace", {"old_string": "Ada"}, "new_string"),
    ],
)
def test_missing_required_new_argument_is_an_error(
    tool: str, args: dict[str, Any], missing: str
) -> None:
    assert error(tool, view("Name: Ada"), **args) == f"missing required argument '{missing}'"


# -- read-only and limits --------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("core_memory_append", {"content": "x"}),
        ("core_memory_replace", {"old_content": "a", "new_content": "b"}),
        ("memory_replace", {"old_string": "a", "new_string": "b"}),
        ("memory_insert", {"new_string": "x"}),
        ("memory_rethink", {"new_memory": "x"}),
    ],
)
def test_read_only_block_is_refused(tool: str, args: dict[str, Any]) -> None:
    block = view("a", label="policies", read_only=True)
    assert error(tool, block, **args) == (
        "memory block 'policies' is read-only: agents cannot edit it"
    )


def test_read_only_is_checked_before_arguments() -> None:
    block = view("a", label="policies", read_only=True)
    assert error("memory_replace", block) == (
        "memory block 'policies' is read-only: agents cannot edit it"
    )


def test_edit_up_to_the_limit_is_allowed() -> None:
    assert edit("core_memory_append", view("12345", limit=10), content="6789") == "12345\n6789"


def test_edit_over_the_limit_is_refused_as_full() -> None:
    msg = error("core_memory_append", view("12345", limit=10), content="67890")
    assert msg == (
        "Edit failed: memory block 'human' is full. The new value would be 11 characters, "
        "over its limit of 10. Remove or condense something first "
        "(memory_rethink or memory_replace)."
    )


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("core_memory_replace", {"old_content": "a", "new_content": "aaaaaa"}),
        ("memory_replace", {"old_string": "a", "new_string": "aaaaaa"}),
        ("memory_insert", {"new_string": "bbbbb"}),
        ("memory_rethink", {"new_memory": "cccccc"}),
    ],
)
def test_every_tool_respects_the_limit(tool: str, args: dict[str, Any]) -> None:
    msg = error(tool, view("a", label="persona", limit=5), **args)
    assert msg.startswith("Edit failed: memory block 'persona' is full.")
    assert "over its limit of 5" in msg


def test_shrinking_edit_on_an_over_limit_block_is_allowed() -> None:
    # A block already over its limit (the limit was lowered) can still be condensed.
    assert edit("memory_rethink", view("x" * 20, limit=10), new_memory="short") == "short"


def test_edits_do_not_mutate_the_view() -> None:
    block = view("Name: Ada")
    edit("memory_replace", block, old_string="Ada", new_string="Bob")
    assert block.value == "Name: Ada"


@pytest.mark.parametrize(
    ("tool", "block", "args"),
    [
        ("core_memory_replace", view("v", label="lbl"), {"old_content": "zz", "new_content": ""}),
        ("memory_replace", view("v", label="lbl"), {"old_string": "zz", "new_string": ""}),
        ("memory_replace", view("zz zz", label="lbl"), {"old_string": "zz", "new_string": ""}),
        ("memory_insert", view("v", label="lbl"), {"new_string": "x", "insert_line": 9}),
        ("memory_rethink", view("v", label="lbl", read_only=True), {"new_memory": "x"}),
        ("memory_rethink", view("v", label="lbl", limit=1), {"new_memory": "xx"}),
    ],
)
def test_block_errors_name_the_label(tool: str, block: BlockView, args: dict[str, Any]) -> None:
    assert "memory block 'lbl'" in error(tool, block, **args)


def _patch(value: str, patch: str, limit: int = 1000) -> str:

    return apply_edit(
        "memory_apply_patch", BlockView("human", value, limit, False), {"patch": patch}
    )


def test_apply_patch_replaces_anchored_lines() -> None:
    value = "Name: Sam\nLikes: tea\nCity: Oslo"
    patch = "@@\n Name: Sam\n-Likes: tea\n+Likes: coffee\n+Pet: cat\n"
    assert _patch(value, patch) == "Name: Sam\nLikes: coffee\nPet: cat\nCity: Oslo"


def test_apply_patch_hunks_apply_in_order_and_pure_additions_append() -> None:
    value = "a\nb\nc"
    patch = "@@\n-a\n+A\n@@\n-c\n+C\n@@\n+d"
    assert _patch(value, patch) == "A\nb\nC\nd"


@pytest.mark.parametrize(
    ("value", "patch", "why"),
    [
        ("a\nb", "-x\n+y", "not found"),
        ("a\na", "-a\n+b", "matches 2 places"),
        ("a", "just words", "No applicable hunks"),
        ("a", "*** Add Block: x\n+y", "multi-block"),
        ("a", "@@\n-a\n+bbbbbbbbbbbbbbbbbbbb", "full"),
    ],
)
def test_apply_patch_failures_change_nothing(value: str, patch: str, why: str) -> None:

    with pytest.raises(MemoryToolError, match=why):
        _patch(value, patch, limit=10)
