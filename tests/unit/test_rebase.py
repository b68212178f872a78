"""A proposal's change made on the agent as it has become (o_evolution/rebase.py)."""

from __future__ import annotations

import pytest

from o_contracts.evolution import EvolutionConfig, Patch, VersionSpec
from o_evolution.patches import PatchRefused, apply_patch
from o_evolution.rebase import block_edits, merged_fields, rebased

CONFIG = EvolutionConfig(enabled=True)
PARENT = VersionSpec(
    system="You are helpful.", blocks={"persona": "I am Sam."}, tools=["send_message"]
)


def patch(*ops: dict[str, object]) -> Patch:
    return Patch.model_validate({"ops": list(ops)})


def candidate_of(p: Patch) -> VersionSpec:
    return apply_patch(PARENT, p, CONFIG, {"send_message", "web_search"})


def test_an_agent_unchanged_since_the_proposal_gets_the_candidate() -> None:
    p = patch({"op": "append_text", "target": "block:persona", "text": "I greet."})
    assert rebased(PARENT, PARENT, candidate_of(p), p) == candidate_of(p)


def test_a_block_edited_since_keeps_the_edit_and_gets_the_patch() -> None:
    p = patch({"op": "append_text", "target": "block:persona", "text": "I greet."})
    now = PARENT.model_copy(update={"blocks": {"persona": "I am Sam.\nI like sailing."}})
    got = rebased(now, PARENT, candidate_of(p), p)
    assert got.blocks == {"persona": "I am Sam.\nI like sailing.\nI greet."}
    assert got.system == PARENT.system


def test_an_anchor_gone_since_refuses_the_change() -> None:
    p = patch({"op": "replace_text", "target": "block:persona", "old": "Sam", "new": "Samuel"})
    now = PARENT.model_copy(update={"blocks": {"persona": "I am Alex."}})
    with pytest.raises(PatchRefused, match="block persona changed since"):
        rebased(now, PARENT, candidate_of(p), p)


def test_a_field_the_patch_leaves_alone_keeps_what_it_has_become() -> None:
    p = patch({"op": "append_text", "target": "block:persona", "text": "I greet."})
    now = PARENT.model_copy(update={"system": "You are terse.", "tools": ["web_search"]})
    got = rebased(now, PARENT, candidate_of(p), p)
    assert (got.system, got.tools) == ("You are terse.", ["web_search"])


def test_a_field_changed_both_by_the_patch_and_since_is_refused() -> None:
    p = patch({"op": "append_text", "target": "system", "text": "Be brief."})
    now = PARENT.model_copy(update={"system": "You are terse."})
    with pytest.raises(PatchRefused, match="system prompt changed since"):
        merged_fields(now, PARENT, candidate_of(p))


def test_a_field_already_the_candidates_stays_so() -> None:
    """A promotion delivered again after its fields were changed changes nothing more."""
    p = patch({"op": "add_tool", "name": "web_search"})
    now = PARENT.model_copy(update={"tools": ["send_message", "web_search"]})
    assert merged_fields(now, PARENT, candidate_of(p))["tools"] == ["send_message", "web_search"]


def test_block_edits_are_grouped_by_block_in_the_patchs_order() -> None:
    p = patch(
        {"op": "append_text", "target": "block:persona", "text": "a"},
        {"op": "append_text", "target": "system", "text": "b"},
        {"op": "replace_text", "target": "block:persona", "old": "a", "new": "c"},
    )
    edits = block_edits(p)
    assert list(edits) == ["persona"]
    assert [e.op for e in edits["persona"]] == ["append_text", "replace_text"]
