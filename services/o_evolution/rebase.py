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

Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from o_contracts.evolution import AppendText, Patch, ReplaceText, VersionSpec
from o_contracts.text_edits import TextEditRefused, apply_text_edits
from o_evolution.patches import PatchRefused

# The fields merged three-way, with what a refusal calls them.
_FIELDS = {
    "system": "system prompt",
    "tools": "tools",
    "tool_rules": "tool rules",
    "model_settings": "model settings",
}


def block_edits(patch: Patch) -> dict[str, list[ReplaceText | AppendText]]:
    """The patch's text edits on each evolvable block, by label, in the patch's order."""
    edits: dict[str, list[ReplaceText | AppendText]] = defaultdict(list)
    for op in patch.ops:
        if isinstance(op, ReplaceText | AppendText) and op.target.startswith("block:"):
            edits[op.target.removeprefix("block:")].append(op)
    return dict(edits)


def merged_fields(now: VersionSpec, parent: VersionSpec, candidate: VersionSpec) -> dict[str, Any]:
    """The non-block fields the change makes of `now` (each three-way, as above);
    PatchRefused names a field changed both by the patch and since the proposal."""
    out: dict[str, Any] = {}
    for field, name in _FIELDS.items():
        mine, base, theirs = getattr(now, field), getattr(parent, field), getattr(candidate, field)
        if mine == base or mine == theirs:
            out[field] = theirs
        elif base == theirs:
            out[field] = mine
        else:
            raise PatchRefused(
                f"the agent's {name} changed since the proposal was made, and the patch changes"
                " it too: the candidate was judged on the old one (propose again)"
            )
    return out


def rebased(
    now: VersionSpec, parent: VersionSpec, candidate: VersionSpec, patch: Patch
) -> VersionSpec:
    """The version the proposal makes of the agent as it is `now`; PatchRefused when it
    no longer applies."""
    blocks = dict(now.blocks)
    for label, edits in block_edits(patch).items():
        if label not in blocks:
            raise PatchRefused(f"the agent no longer has the block '{label}' the patch edits")
        try:
            blocks[label] = apply_text_edits(blocks[label], edits)
        except TextEditRefused as exc:
            raise PatchRefused(
                f"block {label} changed since the proposal was made: {exc.reason}"
            ) from None
    return VersionSpec(**merged_fields(now, parent, candidate), blocks=blocks)
