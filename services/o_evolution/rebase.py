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

A rollback is the same in reverse: the change from the version served to the one rolled
back to, made on the agent as it is (`edits_between` turns a block's change into edits
anchored on its surrounding lines), so a rollback takes back evolution's change and keeps
what the agent's memory tools wrote since.

Pure: no I/O.
"""

from __future__ import annotations

import difflib
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

    @classmethod
    def of_proposal(cls, parent: VersionSpec, candidate: VersionSpec, patch: Patch) -> Change:
        return cls(parent, candidate, block_edits(patch), "the proposal was made")

    @classmethod
    def back_to(
        cls, served: VersionSpec, target: VersionSpec, promotions: list[Promoted] | None
    ) -> Change:
        """A rollback from the version served to `target`. `promotions`: the promotions
        that led from `target` to the version served, newest first, when the history has
        only those in between; each one's block edits are taken back where they were made,
        so what the agent wrote in a block between a proposal and its promotion stays too.
        Otherwise (None, or an edit that cannot be undone) a block goes from the version
        served to the target's text."""
        edits: Edits = {}
        for label, value in target.blocks.items():
            if label not in served.blocks:
                continue
            undone = _undo_all(label, promotions) if promotions is not None else None
            if undone is None:
                undone = edits_between(served.blocks[label], value, label)
            if undone:
                edits[label] = undone
        return cls(served, target, edits, f"{served.version_id} was served")


@dataclass(frozen=True)
class Promoted:
    """A promotion as the history has it: the version it served, and its patch's block edits."""

    spec: VersionSpec
    edits: Edits


def _undo_all(label: str, promotions: list[Promoted]) -> list[ReplaceText | AppendText] | None:
    out: list[ReplaceText | AppendText] = []
    for promoted in promotions:
        after = promoted.spec.blocks.get(label)
        edits = promoted.edits.get(label, [])
        if after is None or not edits:
            continue
        undone = undo_edits(after, edits)
        if undone is None:
            return None
        out += undone
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
