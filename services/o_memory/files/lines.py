"""A file as the agent reads it: numbered lines, and windows of them.

As Letta shows files: prose (markdown) one sentence per line, code line by line with its
indentation, anything else line by line trimmed; blank lines are left out and the rest
numbered from 1. An open file shows a header saying which lines are in view. Offsets
and lengths count these numbered lines (open_files' offset is 0-based).
"""

from __future__ import annotations

import re

from o_contracts.file_types import ViewStrategy

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_SPACES = re.compile(r"\s+")


def units(text: str, strategy: ViewStrategy) -> list[str]:
    """The file's lines (sentences for prose), blank ones left out."""
    if not text:
        return []
    if strategy == "sentences":
        parts = (_SPACES.sub(" ", s.strip()) for s in _SENTENCE.split(text.strip()))
        return [s for s in parts if s]
    if strategy == "code":
        return [line.rstrip() for line in text.splitlines() if line.strip()]
    return [line.strip() for line in text.splitlines() if line.strip()]


def numbered(lines: list[str], first: int = 0) -> list[str]:
    return [f"{first + i + 1}: {line}" for i, line in enumerate(lines)]


class BadWindow(ValueError):
    """A window that does not fit the file; the message is for the model."""


def window(
    lines: list[str],
    file_name: str,
    strategy: ViewStrategy,
    start: int | None = None,
    end: int | None = None,
    *,
    strict: bool = False,
) -> list[str]:
    """Lines [start, end) (0-based, end exclusive), numbered, after a header saying which.

    An end past the file stops at its last line; a start past it is refused; with
    `strict`, so is an empty range.
    """
    total = len(lines)
    if not total:
        return []
    kind = "sentences" if strategy == "sentences" else "lines"
    if start is not None and end is not None and start >= end and strict:
        raise BadWindow(f"Invalid range: start ({start}) must be less than end ({end})")
    if start is not None and start >= total:
        raise BadWindow(
            f"File {file_name} has only {total} {kind}, but requested offset {start + 1}"
            " is out of range"
        )
    start = max(0, start) if start is not None else None
    end = min(end, total) if end is not None else None
    shown = numbered(lines[start:end], start or 0)
    if start is not None and end is not None:
        header = f"[Viewing {kind} {start + 1} to {end} (out of {total} {kind})]"
    elif start is not None:
        header = f"[Viewing {kind} {start + 1} to end (out of {total} {kind})]"
    else:
        header = f"[Viewing file start (out of {total} {kind})]"
    return [header, *shown]


def visible_content(
    text: str,
    file_name: str,
    strategy: ViewStrategy,
    start_line: int | None = None,
    end_line: int | None = None,
    max_chars: int | None = None,
) -> str:
    """An open file's window as stored: `start_line` 1-based, `end_line` exclusive (the
    last line shown, 1-based), as FileView records them. Stored up to `max_chars` (the
    prompt cuts it further to the agent's limit)."""
    start = start_line - 1 if start_line is not None else None
    try:
        shown = window(units(text, strategy), file_name, strategy, start, end_line)
    except BadWindow:
        return ""
    content = "\n".join(shown)
    return content[:max_chars] if max_chars is not None else content
