"""A file's text cut into the chunks that are embedded: consecutive spans that join back
into the whole text.

Spans, not cleaned copies: the log carries each chunk's text with its embedding
(events/folders.py), and the projection rebuilds the file's text by joining them, so
nothing of the text may be lost between chunks (and none overlap). A chunk ends at the
best boundary before its target length: a blank line, a line end, a sentence end, a
space; a chunk with none is cut at the target. Every chunk holds some non-blank text.
"""

from __future__ import annotations

import re

# Letta's embedding_chunk_size is in tokens; at about four characters a token.
CHARS_PER_TOKEN = 4
# A chunk is at least half its target when a boundary allows it (no slivers).
_MIN_SHARE = 0.5
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s")


def target_chars(chunk_size_tokens: int | None) -> int:
    """A folder's embedding_chunk_size (default 300 tokens, at most 2000) in characters."""
    tokens = min(max(chunk_size_tokens or 300, 16), 2000)
    return tokens * CHARS_PER_TOKEN


def _boundary(text: str, start: int, target: int) -> int:
    """Where the chunk starting at `start` ends (never past start + target)."""
    limit = start + target
    floor = start + int(target * _MIN_SHARE)
    for separator in ("\n\n", "\n"):
        at = text.rfind(separator, floor, limit)
        if at != -1:
            return at + len(separator)
    sentence = None
    for match in _SENTENCE_END.finditer(text, floor, limit):
        sentence = match.end()
    if sentence is not None:
        return sentence
    at = text.rfind(" ", floor, limit)
    return at + 1 if at != -1 else limit


def chunk_ends(text: str, target: int) -> list[int]:
    """The end offset of each chunk of `text` (the next one starts there)."""
    ends: list[int] = []
    start = 0
    while start < len(text):
        end = len(text) if len(text) - start <= target else _boundary(text, start, target)
        ends.append(end)
        start = end
    return _without_blank(text, ends)


def _without_blank(text: str, ends: list[int]) -> list[int]:
    """Blank chunks (whitespace only) joined to their neighbour: to the one before, or
    for a leading one, to the one after."""
    kept: list[int] = []
    start = 0
    for end in ends:
        if text[start:end].strip() or not kept:
            kept.append(end)
        else:
            kept[-1] = end
        start = end
    if kept and not text[: kept[0]].strip():
        kept = kept[1:] if len(kept) > 1 else []
    return kept


def spans(text: str, ends: list[int]) -> list[str]:
    starts = [0, *ends[:-1]]
    return [text[s:e] for s, e in zip(starts, ends, strict=True)]
