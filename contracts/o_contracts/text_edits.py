"""A patch's text ops (`replace_text`, `append_text`) applied to one text, all or none.

Shared by evolution, which applies a patch to a version in memory (o_evolution/patches.py),
and the memory service, which applies a promoted patch's edits to a block as it is when
the command is decided (`EditBlockText`), so an edit the agent made in between is kept.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import Field

from o_contracts.evolution import AppendText, Patch, ReplaceText

TextEdit = Annotated[ReplaceText | AppendText, Field(discriminator="op")]


class TextEditRefused(ValueError):
    """An edit that cannot be placed: its anchor is missing or occurs more than once."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def apply_text_edit(text: str, edit: ReplaceText | AppendText, where: str) -> str:
    """`text` with `edit` made; `where` names the edit in a refusal."""
    if isinstance(edit, ReplaceText):
        count = text.count(edit.old)
        if count == 0:
            raise TextEditRefused(f"{where}: text not found in {edit.target}")
        if count > 1:
            raise TextEditRefused(
                f"{where}: the text is ambiguous: it occurs {count} times in {edit.target}"
            )
        return text.replace(edit.old, edit.new)
    return f"{text}\n{edit.text}" if text else edit.text


def apply_text_edits(text: str, edits: Iterable[ReplaceText | AppendText]) -> str:
    for i, edit in enumerate(edits):
        text = apply_text_edit(text, edit, f"edits[{i}] ({edit.op})")
    return text


def block_edits(patch: Patch) -> dict[str, list[ReplaceText | AppendText]]:
    """A patch's text edits on each block (`block:<label>` targets), by label, in order."""
    edits: dict[str, list[ReplaceText | AppendText]] = {}
    for op in patch.ops:
        if isinstance(op, ReplaceText | AppendText) and op.target.startswith("block:"):
            edits.setdefault(op.target.removeprefix("block:"), []).append(op)
    return edits
