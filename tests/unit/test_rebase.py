"""A change made on the agent as it has become (o_evolution/rebase.py): a promotion's
patch, and a rollback's way back."""

from __future__ import annotations

import pytest

from o_contracts.evolution import EvolutionConfig, Patch, VersionSpec
from o_contracts.text_edits import apply_text_edits, block_edits
from o_evolution.patches import PatchRefused, apply_patch
from o_evolution.rebase import (
    Change,
    Step,
    edits_between,
    inverted,
    made_on,
    merged_fields,
    undo_edits,
)

CONFIG = EvolutionConfig(enabled=True)
PARENT = VersionSpec(
    system="You are helpful.", blocks={"persona": "I am Sam."}, tools=["send_message"]
)
GREET = {"op": "append_text", "target": "block:persona", "text": "I greet."}


def patch(*ops: dict[str, object]) -> Patch:
    return Patch.model_validate({"ops": list(ops)})


def change(p: Patch, parent: VersionSpec = PARENT) -> Change:
    candidate = apply_patch(parent, p, CONFIG, {"send_message", "web_search"})
    return Change.of_proposal(parent, candidate, p)


def persona(text: str, spec: VersionSpec = PARENT) -> VersionSpec:
    return spec.model_copy(update={"blocks": {"persona": text}})


def test_an_agent_unchanged_since_the_proposal_gets_the_candidate() -> None:
    c = change(patch(GREET))
    assert made_on(PARENT, c) == c.target


def test_a_block_edited_since_keeps_the_edit_and_gets_the_patch() -> None:
    got = made_on(persona("I am Sam.\nI like sailing."), change(patch(GREET)))
    assert got.blocks == {"persona": "I am Sam.\nI like sailing.\nI greet."}
    assert got.system == PARENT.system


def test_an_anchor_gone_since_refuses_the_change() -> None:
    c = change(patch({"op": "replace_text", "target": "block:persona", "old": "Sam", "new": "S"}))
    with pytest.raises(PatchRefused, match="block persona changed since the proposal"):
        made_on(persona("I am Alex."), c)


def test_a_field_the_patch_leaves_alone_keeps_what_it_has_become() -> None:
    now = PARENT.model_copy(update={"system": "You are terse.", "tools": ["web_search"]})
    got = made_on(now, change(patch(GREET)))
    assert (got.system, got.tools) == ("You are terse.", ["web_search"])


def test_a_field_changed_both_by_the_patch_and_since_is_refused() -> None:
    c = change(patch({"op": "append_text", "target": "system", "text": "Be brief."}))
    with pytest.raises(PatchRefused, match="system prompt changed since the proposal"):
        merged_fields(PARENT.model_copy(update={"system": "You are terse."}), c)


def test_a_field_already_the_candidates_stays_so() -> None:
    """A promotion delivered again after its fields were changed changes nothing more."""
    c = change(patch({"op": "add_tool", "name": "web_search"}))
    now = PARENT.model_copy(update={"tools": ["send_message", "web_search"]})
    assert merged_fields(now, c)["tools"] == ["send_message", "web_search"]


def test_block_edits_are_grouped_by_block_in_the_patchs_order() -> None:
    p = patch(
        GREET,
        {"op": "append_text", "target": "system", "text": "b"},
        {"op": "replace_text", "target": "block:persona", "old": "greet", "new": "wave"},
    )
    edits = block_edits(p)
    assert list(edits) == ["persona"]
    assert [e.op for e in edits["persona"]] == ["append_text", "replace_text"]


def test_a_rollback_takes_back_the_promotions_and_keeps_every_memory_edit() -> None:
    """Promoted after a memory edit, then edited again: rolling back to the version before
    the promotion takes back the patch alone."""
    p = patch(GREET, {"op": "replace_text", "target": "block:persona", "old": "Sam", "new": "Sam!"})
    promoted = made_on(persona("I am Sam.\nI like sailing."), change(p))
    assert promoted.blocks["persona"] == "I am Sam!.\nI like sailing.\nI greet."
    now = persona(promoted.blocks["persona"].replace("sailing", "rowing") + "\nI hum.")
    back = Change.back_to(promoted, PARENT, [Step.promotion(promoted, block_edits(p))])
    assert made_on(now, back).blocks == {"persona": "I am Sam.\nI like rowing.\nI hum."}


def test_a_rollback_refuses_where_the_agent_rewrote_what_it_takes_back() -> None:
    p = patch(GREET)
    promoted = made_on(PARENT, change(p))
    back = Change.back_to(promoted, PARENT, [Step.promotion(promoted, block_edits(p))])
    with pytest.raises(PatchRefused, match="block persona changed since"):
        made_on(persona("I am Sam.\nI greet warmly."), back)


def test_a_rollback_without_the_promotions_goes_by_the_two_versions_texts() -> None:
    served = persona("I am Sam.\nI greet.")
    back = Change.back_to(served, PARENT, None)
    assert made_on(persona("I am Sam.\nI greet.\nI hum."), back).blocks["persona"] == (
        "I am Sam.\nI hum."
    )


def rolled_back(now: VersionSpec, back: Change) -> tuple[VersionSpec, Step]:
    """`back` made on the agent as it is `now`: the version it serves, and the step the
    history records (VersionRolledBack's `made` and `taken_back`)."""
    served = made_on(now, back)
    return served, Step.rollback(served, back.edits, back.inverse)


def test_a_rollback_across_a_rollback_makes_the_patch_again_and_keeps_memory_edits() -> None:
    """Promoted, edited, rolled back, edited again; rolled back to the promoted version
    (the rollback undone): the patch is made again, both memory edits stay. By the two
    versions' texts, the edit made between the promotion and the first rollback was lost."""
    p = patch(GREET)
    promoted = made_on(PARENT, change(p))
    promotion = Step.promotion(promoted, block_edits(p))
    now = persona(promoted.blocks["persona"] + "\nI sail.")
    first, step = rolled_back(now, Change.back_to(promoted, PARENT, [promotion]))
    assert first.blocks["persona"] == "I am Sam.\nI sail."
    now = persona(first.blocks["persona"] + "\nI row.")

    again = Change.back_to(first, promoted, [step])
    second, undone = rolled_back(now, again)
    assert second.blocks["persona"] == "I am Sam.\nI sail.\nI row.\nI greet."
    by_text = Change.back_to(first, promoted, None)
    assert "I sail." not in made_on(now, by_text).blocks["persona"]

    # And back to before everything, across the promotion and both rollbacks.
    now = persona(second.blocks["persona"] + "\nI hum.")
    back = Change.back_to(second, PARENT, [undone, step, promotion])
    assert made_on(now, back).blocks["persona"] == "I am Sam.\nI sail.\nI row.\nI hum."


def test_a_rollback_whose_history_is_not_known_goes_by_text_and_can_be_taken_back() -> None:
    served = persona("I am Sam.\nI greet.\nI hum.")
    back = Change.back_to(served, PARENT, [Step.rollback(served, None, None)])
    assert back.edits == {
        "persona": edits_between(served.blocks["persona"], "I am Sam.", "persona")
    }
    first, step = rolled_back(served, back)
    assert first.blocks["persona"] == "I am Sam."
    undone = Change.back_to(first, served, [step])
    assert made_on(first, undone).blocks["persona"] == served.blocks["persona"]


def test_steps_whose_edits_no_longer_apply_to_the_version_served_go_by_text() -> None:
    """A promotion's undo anchored on text the version served no longer has."""
    p = patch({"op": "replace_text", "target": "block:persona", "old": "Sam", "new": "Sam!"})
    promoted = made_on(PARENT, change(p))
    served = persona("I am Alex.\nI greet.")
    back = Change.back_to(served, promoted, [Step.promotion(promoted, block_edits(p))])
    assert made_on(served, back).blocks["persona"] == promoted.blocks["persona"]


def test_a_deletion_cannot_be_inverted() -> None:
    gone = block_edits(
        patch({"op": "replace_text", "target": "block:persona", "old": "a", "new": ""})
    )
    assert inverted(gone["persona"]) is None
    whole = edits_between("", "hello", "persona")
    assert apply_text_edits("hello", inverted(whole) or []) == ""


def test_undo_is_none_where_the_text_cannot_tell() -> None:
    empty = {"op": "replace_text", "target": "block:persona", "old": "Sam", "new": ""}
    assert undo_edits("I am .", block_edits(patch(empty))["persona"]) is None
    twice = {"op": "replace_text", "target": "block:persona", "old": "Sam", "new": "a"}
    assert undo_edits("I am a.", block_edits(patch(twice))["persona"]) is None


@pytest.mark.parametrize(
    ("base", "target", "now", "expected"),
    [
        ("A\n\nB\n\nC", "A\n\nC", "A\n\nB\n\nC\nD", "A\n\nC\nD"),
        ("A\nB\nC\nD\nE\nF", "A2\nB\nC\nD\nE\nF2", "A\nB\nC\nD\nE\nF\nG", "A2\nB\nC\nD\nE\nF2\nG"),
        ("", "hello", "mem", "mem\nhello"),
    ],
)
def test_edits_between_two_texts_make_the_change_on_a_grown_text(
    base: str, target: str, now: str, expected: str
) -> None:
    edits = edits_between(base, target, "persona")
    assert apply_text_edits(base, edits) == target
    assert apply_text_edits(now, edits) == expected
