"""What the executor records of text it did not write: model answers and tool results.

That text goes into events and from there into Postgres, which cannot store a
NUL character in text or jsonb, and into MessagePack, which cannot carry a
lone surrogate; a model or a user's tool can produce either. Such characters
are replaced (U+FFFD) rather than refused: the answer or result is still the
run's fact. Tool results are also bounded, so that no event can outgrow the
log's payload limit (NATS' max_payload, 1 MiB by default): a result longer than
the bound keeps its head and says how much was cut.
"""

from __future__ import annotations

from o_contracts.models import ToolCall

REPLACEMENT = "\ufffd"
# A tool result's text, at most (Letta's tools default to 50,000 characters of
# return; user tools may ask for more, up to this). 4 bytes per character at
# worst in UTF-8: with stdout and stderr below, a ToolReturned stays well
# under 1 MiB.
MAX_TOOL_RETURN_CHARS = 100_000
# Lines of a tool's stdout and stderr kept, and characters per line.
MAX_OUTPUT_LINES = 200
MAX_OUTPUT_LINE_CHARS = 1_000
# A summary of evicted messages is meant to be a few paragraphs.
MAX_SUMMARY_CHARS = 20_000


def storable(text: str) -> str:
    """`text` with NUL characters and lone surrogates replaced."""
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def bounded(text: str, limit: int) -> str:
    """`text`, storable and at most about `limit` characters (the cut is said)."""
    text = storable(text)
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


def tool_output(lines: list[str] | None) -> list[str] | None:
    if lines is None:
        return None
    kept = [bounded(line, MAX_OUTPUT_LINE_CHARS) for line in lines[-MAX_OUTPUT_LINES:]]
    if len(lines) > MAX_OUTPUT_LINES:
        kept.insert(0, f"[... {len(lines) - MAX_OUTPUT_LINES} earlier lines cut]")
    return kept


def storable_call(call: ToolCall) -> ToolCall:
    return ToolCall(
        id=storable(call.id), name=storable(call.name), arguments=storable(call.arguments)
    )
