"""The core-memory tools' semantics: pure functions from a block's value to a new value.

Each failure is a `MemoryToolError` whose message is written for the model
(it becomes an error tool return); the block stays unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class MemoryToolError(ValueError):
    pass


@dataclass(frozen=True)
class BlockView:
    label: str
    value: str
    limit: int
    read_only: bool


def _str_arg(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if value is None:
        raise MemoryToolError(f"missing required argument '{name}'")
    if not isinstance(value, str):
        raise MemoryToolError(f"argument '{name}' must be a string")
    return value


def core_memory_append(block: BlockView, args: dict[str, Any]) -> str:
    content = _str_arg(args, "content")
    return f"{block.value}\n{content}" if block.value else content


def core_memory_replace(block: BlockView, args: dict[str, Any]) -> str:
    old = _str_arg(args, "old_content")
    new = _str_arg(args, "new_content")
    if not old:
        raise MemoryToolError("old_content must not be empty")
    if old not in block.value:
        raise MemoryToolError(f"Old content '{old}' not found in memory block '{block.label}'")
    return block.value.replace(old, new)


def memory_replace(block: BlockView, args: dict[str, Any]) -> str:
    old = _str_arg(args, "old_string")
    new = _str_arg(args, "new_string")
    if not old:
        raise MemoryToolError("old_string must not be empty")
    count = block.value.count(old)
    if count == 0:
        raise MemoryToolError(
            f"No replacement was performed: old_string '{old}' did not appear verbatim "
            f"in memory block '{block.label}'"
        )
    if count > 1:
        raise MemoryToolError(
            f"No replacement was performed: old_string '{old}' appears {count} times in "
            f"memory block '{block.label}'; make it unique by including more context"
        )
    return block.value.replace(old, new, 1)


def memory_insert(block: BlockView, args: dict[str, Any]) -> str:
    new = _str_arg(args, "new_string")
    line = args.get("insert_line", -1)
    if isinstance(line, bool) or not isinstance(line, int):
        raise MemoryToolError("insert_line must be an integer (-1 appends at the end)")
    lines = block.value.split("\n") if block.value else []
    if line == -1:
        line = len(lines)
    if line < 0 or line > len(lines):
        raise MemoryToolError(
            f"insert_line {line} is out of range: memory block '{block.label}' has "
            f"{len(lines)} lines (valid: 0..{len(lines)}, or -1 for the end)"
        )
    lines[line:line] = new.split("\n")
    return "\n".join(lines)


def memory_rethink(block: BlockView, args: dict[str, Any]) -> str:
    return _str_arg(args, "new_memory")


def _hunks(patch: str) -> list[list[str]]:
    hunks: list[list[str]] = []
    current: list[str] = []
    for line in patch.splitlines():
        if line.startswith(("***", "---", "+++")):
            continue  # diff headers say nothing about the content
        if line.startswith("@@"):
            if current:
                hunks.append(current)
            current = []
        elif line.startswith((" ", "-", "+")):
            current.append(line)
        elif not line.strip():
            current.append(" ")  # a blank context line
    if current:
        hunks.append(current)
    return hunks


def memory_apply_patch(block: BlockView, args: dict[str, Any]) -> str:
    """A simplified unified diff anchored on content, not line numbers (Letta's format).

    Hunks apply in order to the rolling text; each hunk's context and removed
    lines must occur exactly once. Any failing hunk fails the whole patch.
    """
    patch = _str_arg(args, "patch")
    if "*** Add Block:" in patch or "*** Delete Block:" in patch:
        raise MemoryToolError(
            "multi-block patches (*** Add Block / *** Delete Block) are not supported; "
            "patch one block, named by label"
        )
    hunks = _hunks(patch)
    if not hunks:
        raise MemoryToolError(
            "No applicable hunks found in patch: lines must start with ' ', '-' or '+'"
        )
    lines = block.value.split("\n")
    for n, hunk in enumerate(hunks, 1):
        expected = [h[1:] for h in hunk if h[0] in " -"]
        replacement = [h[1:] for h in hunk if h[0] in " +"]
        if not expected:
            lines = [*lines, *replacement] if block.value else replacement
            continue
        starts = [
            i
            for i in range(len(lines) - len(expected) + 1)
            if lines[i : i + len(expected)] == expected
        ]
        if not starts:
            raise MemoryToolError(
                f"Failed to apply patch: hunk {n}'s context was not found in memory block "
                f"'{block.label}'. Expected:\n" + "\n".join(expected[:4])
            )
        if len(starts) > 1:
            raise MemoryToolError(
                f"Failed to apply patch: hunk {n}'s context matches {len(starts)} places in "
                f"memory block '{block.label}'; add more surrounding context"
            )
        i = starts[0]
        lines = lines[:i] + replacement + lines[i + len(expected) :]
    return "\n".join(lines)


EDITS: dict[str, Callable[[BlockView, dict[str, Any]], str]] = {
    "memory_apply_patch": memory_apply_patch,
    "core_memory_append": core_memory_append,
    "core_memory_replace": core_memory_replace,
    "memory_replace": memory_replace,
    "memory_insert": memory_insert,
    "memory_rethink": memory_rethink,
}


def apply_edit(tool_name: str, block: BlockView, args: dict[str, Any]) -> str:
    """The block's new value after the tool call, or MemoryToolError."""
    edit = EDITS.get(tool_name)
    if edit is None:
        raise MemoryToolError(f"'{tool_name}' is not a memory tool")
    if block.read_only:
        raise MemoryToolError(f"memory block '{block.label}' is read-only: agents cannot edit it")
    new_value = edit(block, args)
    if len(new_value) > block.limit:
        raise MemoryToolError(
            f"Edit failed: memory block '{block.label}' is full. The new value would be "
            f"{len(new_value)} characters, over its limit of {block.limit}. Remove or "
            "condense something first (memory_rethink or memory_replace)."
        )
    return new_value
