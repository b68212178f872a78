"""Anthropic's prompt cache: where O marks a request (as Letta marks it), and the fake's
cache, which reads what an earlier request wrote."""

from __future__ import annotations

from typing import Any

from o_executor.anthropic_format import EPHEMERAL, to_anthropic, with_cache_marks
from tests.fakes.anthropic_server import PromptCache

TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("memory_insert", "archival_memory_search")
]
SYSTEM = {"role": "system", "content": "You are Sam."}
USER = {"role": "user", "content": "What do I drink?"}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "function": {"name": "archival_memory_search", "arguments": "{}"}}
    ],
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "nothing"}


def marked(*messages: dict[str, Any]) -> dict[str, Any]:
    system, turns, tools = with_cache_marks(*to_anthropic(list(messages), TOOLS))
    return {"system": system, "messages": turns, "tools": tools}


def test_the_tools_the_system_prompt_and_the_last_block_are_marked() -> None:
    body = marked(SYSTEM, USER)
    assert body["system"] == [{"type": "text", "text": "You are Sam.", "cache_control": EPHEMERAL}]
    assert [t.get("cache_control") for t in body["tools"]] == [None, EPHEMERAL]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "What do I drink?", "cache_control": EPHEMERAL}],
        }
    ]
    # Only the last block of the last turn: the earlier ones are read through it.
    later = marked(SYSTEM, USER, CALL, RESULT)["messages"]
    assert "cache_control" not in later[0]["content"][-1]
    assert later[-1]["content"][-1]["cache_control"] == EPHEMERAL
    # What it was made from is left as it was.
    system, turns, tools = to_anthropic([SYSTEM, USER], TOOLS)
    with_cache_marks(system, turns, tools)
    assert "cache_control" not in turns[0]["content"][0] and "cache_control" not in tools[-1]


def test_nothing_to_mark_is_left_unmarked() -> None:
    system, turns, tools = with_cache_marks("", [], [])
    assert (system, turns, tools) == ("", [], [])
    thinking = [{"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}]}]
    assert with_cache_marks("s", thinking, [])[1] == thinking


def test_a_step_reads_the_prefix_its_previous_step_wrote() -> None:
    cache = PromptCache()
    first, second = marked(SYSTEM, USER), marked(SYSTEM, USER, CALL, RESULT)
    fresh, written, read = cache.usage(first)
    assert read == 0 and written > 0 and fresh == 0
    fresh, written_again, read = cache.usage(second)
    # The tools, the system prompt and the first message, read; the rest written.
    assert read == written and written_again > 0 and fresh == 0
    # A prompt changed at its start reads nothing.
    changed = marked({"role": "system", "content": "You are Sam. Now: 10:01"}, USER)
    assert cache.usage(changed)[2] < read
