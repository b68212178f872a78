"""A proposal's change made on the agent as it is now, not as it was when proposed.

A candidate is its parent with the patch applied, as of the proposal. By the time it goes
into a canary or is promoted the agent may have moved on: its memory tools edited an
evolvable block, a person changed its system prompt or tools, another proposal was
promoted. Serving the candidate as it was would undo all of that without a word. So:

- **evolvable blocks**: the patch's text edits are made on each block's text as it is now
  (for a promotion, by the memory service on the block's value when it decides:
  `EditBlockText`). An edit whose anchor is gone refuses the whole change.
- **the other fields** (system prompt, tools, tool rules, model settings), each three-way:
  unchanged since the proposal, it takes the candidate's; already the candidate's, it stays;
  not touched by the patch, it keeps what it is now; changed both by the patch and since the
  proposal, the change is refused (the candidate was judged on the old one).

A rollback is the same in reverse: each decision between the version rolled back to and
the one served is taken back where it was made, newest first (a promotion's patch by the
edits that undo it; a rollback, which records the edits it made and those that take them
back, by the latter), so a rollback takes back evolution's changes and keeps what the
agent's memory tools wrote since. Where that history is not known, the change from the
version served to the one rolled back to (`edits_between` turns a block's change into edits
anchored on its surrounding lines).

Pure: no I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from o_contracts.evolution import AppendText, Patch, ReplaceText, VersionSpec
from o_contracts.text_edits import (
    TextEditRefused,
    apply_text_edit,
    apply_text_edits,
    block_edits,
)
from o_evolution.patches import PatchRefused

# The fields merged three-way, with what a refusal calls them.
_FIELDS = {
    "system": "system prompt",
    "tools": "tools",
    "tool_rules": "tool rules",
    "model_settings": "model settings",
}


Edits = dict[str, list[ReplaceText | AppendText]]


@dataclass(frozen=True)
class Change:
    """A change to make on the agent as it is: the non-block fields from `base` to
    `target` (three-way), and `edits` to its evolvable blocks, by label. `since` says,
    in a refusal, since when the agent has moved."""

    base: VersionSpec
    target: VersionSpec
    edits: Edits
    since: str
    # A rollback's: by label, the edits that take its `edits` back (None: not known).
    inverse: Mapping[str, list[ReplaceText | AppendText] | None] | None = None

    def taking_back(self, label: str, before: str) -> list[ReplaceText | AppendText] | None:
        """Edits that take back this change's edits on `label`, made on the text `before`
        (as it was just before them); None where that cannot be told."""
        if self.inverse is not None:
            return self.inverse.get(label)
        edits = self.edits.get(label, [])
        try:
            return undo_edits(apply_text_edits(before, edits), edits)
        except TextEditRefused:
            return None

    @classmethod
    def of_proposal(cls, parent: VersionSpec, candidate: VersionSpec, patch: Patch) -> Change:
        return cls(parent, candidate, block_edits(patch), "the proposal was made")

    @classmethod
    def back_to(cls, served: VersionSpec, target: VersionSpec, steps: list[Step] | None) -> Change:
        """A rollback from the version served to `target`. `steps`: the decisions that led
        from `target` to the version served, newest first (None: the history between them
        is not known). Each one's block edits are taken back where they were made, so what
        the agent wrote in a block since `target`, between a proposal and its promotion
        included, stays. Where that cannot be told (a step whose edits are not known, or
        edits that do not apply to the version served), a block goes from the version
        served to the target's text. The change's `inverse` takes it back in turn."""
        edits: Edits = {}
        inverse: dict[str, list[ReplaceText | AppendText] | None] = {}
        for label, value in target.blocks.items():
            if label not in served.blocks:
                continue
            undone = _chained(label, steps, undo=True) if steps is not None else None
            if undone is not None and _applies(served.blocks[label], undone):
                # (Made again, oldest first: each step's own edits.)
                again = _chained(label, list(reversed(steps or [])), undo=False)
            else:
                undone = edits_between(served.blocks[label], value, label)
                again = inverted(undone)
            if undone:
                edits[label] = undone
                inverse[label] = again
        return cls(served, target, edits, f"{served.version_id} was served", inverse)


@dataclass(frozen=True)
class Step:
    """A decision that changed the version served (a promotion or a rollback), as the
    history has it: the version it served, and by block label the edits that made it
    (`redo`) and the edits that take it back (`undo`). None, or a label's None: not known
    (a rollback recorded before rollbacks kept their edits, edits that cannot be inverted)."""

    spec: VersionSpec
    redo: Mapping[str, list[ReplaceText | AppendText] | None] | None
    undo: Mapping[str, list[ReplaceText | AppendText] | None] | None

    @classmethod
    def promotion(cls, spec: VersionSpec, edits: Edits | None) -> Step:
        """A promotion of a patch whose block edits are `edits` (None: no patch known)."""
        if edits is None:
            return cls(spec, None, None)
        undo = {
            label: undo_edits(spec.blocks[label], made) if label in spec.blocks else []
            for label, made in edits.items()
        }
        return cls(spec, dict(edits), undo)

    @classmethod
    def rollback(
        cls,
        spec: VersionSpec,
        made: Edits | None,
        taken_back: Mapping[str, list[ReplaceText | AppendText] | None] | None,
    ) -> Step:
        return cls(spec, made, taken_back if made is not None else None)


def _chained(label: str, steps: list[Step], *, undo: bool) -> list[ReplaceText | AppendText] | None:
    """The steps' edits on one block (each one's undo, or its redo), one after the other;
    None if any is not known."""
    out: list[ReplaceText | AppendText] = []
    for step in steps:
        known = step.undo if undo else step.redo
        if known is None:
            return None
        edits = known.get(label, [])
        if edits is None:
            return None
        out += edits
    return out


def _applies(text: str, edits: list[ReplaceText | AppendText]) -> bool:
    try:
        apply_text_edits(text, edits)
    except TextEditRefused:
        return False
    return True


def inverted(edits: list[ReplaceText | AppendText]) -> list[ReplaceText | AppendText] | None:
    """Edits that take back `edits_between`'s edits on the text they made, where each
    replacement left text to anchor on; None where one did not (a deletion cannot say where
    to put back). (Its only append is to an empty text: the whole text is the append's.)"""
    out: list[ReplaceText | AppendText] = []
    for edit in reversed(edits):
        if isinstance(edit, AppendText):
            out.append(ReplaceText(target=edit.target, old=edit.text, new=""))
        elif edit.new:
            out.append(ReplaceText(target=edit.target, old=edit.new, new=edit.old))
        else:
            return None
    return out


def undo_edits(
    after: str, edits: list[ReplaceText | AppendText]
) -> list[ReplaceText | AppendText] | None:
    """Edits that take back `edits`, given the text they made: each anchored on the text
    the edit put there, so they apply to that text grown elsewhere since. None where that
    cannot be told (an empty replacement, or one that occurs more than once)."""
    text = after
    out: list[ReplaceText | AppendText] = []
    for edit in reversed(edits):
        if isinstance(edit, AppendText):
            added = edit.text if text == edit.text else "\n" + edit.text
            if not text.endswith(added):
                return None
            undo = ReplaceText(target=edit.target, old=added, new="")
        else:
            if not edit.new:
                return None
            undo = ReplaceText(target=edit.target, old=edit.new, new=edit.old)
        try:
            text = apply_text_edit(text, undo, "undo")
        except TextEditRefused:
            return None
        out.append(undo)
    return out


def merged_fields(now: VersionSpec, change: Change) -> dict[str, Any]:
    """The non-block fields the change makes of `now` (each three-way, as above);
    PatchRefused names a field changed both by the change and since."""
    out: dict[str, Any] = {}
    for field, name in _FIELDS.items():
        mine = getattr(now, field)
        base, theirs = getattr(change.base, field), getattr(change.target, field)
        if mine == base or mine == theirs:
            out[field] = theirs
        elif base == theirs:
            out[field] = mine
        else:
            raise PatchRefused(
                f"the agent's {name} changed since {change.since}, and the change is to it"
                " too: it was judged on the old one"
            )
    return out


def made_on(now: VersionSpec, change: Change) -> VersionSpec:
    """The version the change makes of the agent as it is `now`; PatchRefused when it no
    longer applies."""
    blocks = dict(now.blocks)
    for label, edits in change.edits.items():
        if label not in blocks:
            raise PatchRefused(f"the agent no longer has the block '{label}' the change edits")
        try:
            blocks[label] = apply_text_edits(blocks[label], edits)
        except TextEditRefused as exc:
            raise PatchRefused(
                f"block {label} changed since {change.since}: {exc.reason}"
            ) from None
    return VersionSpec(**merged_fields(now, change), blocks=blocks)


def edits_between(base: str, target: str, label: str) -> list[ReplaceText | AppendText]:
    """Edits that turn `base` into `target`, each anchored on enough of the surrounding
    lines to occur once in `base`: made on a text that has grown since (lines added
    elsewhere), they make the same change there; on a text edited where they apply, an
    anchor is missing and the edit is refused."""
    where = f"block:{label}"
    if base == target:
        return []
    if not base:
        return [AppendText(target=where, text=target)]
    old, new = base.splitlines(keepends=True), target.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    # The fewest lines of context that make every hunk's text occur once; at the length of
    # the text there is one hunk, the whole of it.
    for context in range(1, len(old) + 1):
        edits: list[ReplaceText | AppendText] = []
        for hunk in matcher.get_grouped_opcodes(context):
            before = "".join(old[hunk[0][1] : hunk[-1][2]])
            after = "".join(new[hunk[0][3] : hunk[-1][4]])
            if not before or base.count(before) != 1:
                break
            edits.append(ReplaceText(target=where, old=before, new=after))
        else:
            return edits
    return [ReplaceText(target=where, old=base, new=target)]
