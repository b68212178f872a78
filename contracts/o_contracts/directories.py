"""Folders in the prompt: Letta's `<directories>` section, after the memory blocks.

Each attached folder is a directory; each of its processed files a file block, open
(with the window of lines the agent is looking at) or closed. How many files may be
open and how much of each is shown depend on the model's context window, as in Letta.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Letta's defaults without a context window, and its ceilings.
DEFAULT_MAX_FILES_OPEN = 5
DEFAULT_PER_FILE_CHAR_LIMIT = 50_000
TRUNCATED_WARNING = "# NOTE: This block is truncated, use functions to view the full content."


def file_limits(context_window: int | None) -> tuple[int, int]:
    """(max_files_open, per_file_view_window_char_limit) for a context window: Letta's
    defaults (about four characters a token, a part of the window for files)."""
    if not context_window:
        return DEFAULT_MAX_FILES_OPEN, DEFAULT_PER_FILE_CHAR_LIMIT
    if context_window <= 8_000:
        return 3, 5_000
    if context_window <= 32_000:
        return 5, 15_000
    if context_window <= 128_000:
        return 10, 25_000
    if context_window <= 200_000:
        return 10, 40_000
    return 15, 40_000


def limits_of(llm_config: dict[str, Any] | None) -> tuple[int, int]:
    """An agent's file limits, from its model's context window."""
    return file_limits((llm_config or {}).get("context_window"))


def shown(visible: str | None, char_limit: int) -> str:
    """An open file's window as the prompt shows it: cut at the limit, with a warning."""
    text = visible or ""
    if len(text) <= char_limit:
        return text
    warning = f"...[TRUNCATED]\n{TRUNCATED_WARNING}"
    return text[: max(0, char_limit - len(warning))] + warning


def render_directories(
    directories: Sequence[dict[str, Any]], max_files_open: int, char_limit: int
) -> str:
    """`directories`: the agent's folders in attach order, each {name, description,
    instructions, files: [{name, open, visible}]}; "" when it has none."""
    if not directories:
        return ""
    files = [f for d in directories for f in d.get("files") or ()]
    open_now = sum(1 for f in files if f.get("open") and shown(f.get("visible"), char_limit))
    out = [
        "<directories>\n<file_limits>\n",
        f"- current_files_open={open_now}\n- max_files_open={max_files_open}\n</file_limits>\n",
    ]
    for d in directories:
        out.append(f'<directory name="{d["name"]}">\n')
        if d.get("description"):
            out.append(f"<description>{d['description']}</description>\n")
        if d.get("instructions"):
            out.append(f"<instructions>{d['instructions']}</instructions>\n")
        for f in d.get("files") or ():
            value = shown(f.get("visible"), char_limit) if f.get("open") else ""
            status = "open" if value else "closed"
            out.append(
                f'<file status="{status}" name="{f["name"]}">\n<metadata>\n- read_only=true\n'
                f"- chars_current={len(value)}\n- chars_limit={char_limit}\n</metadata>\n"
            )
            if value:
                out.append(f"<value>\n{value}\n</value>\n")
            out.append("</file>\n")
        out.append("</directory>\n")
    out.append("</directories>")
    return "".join(out)
