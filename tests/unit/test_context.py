"""System prompt compilation: Letta's `<memory_blocks>` rendering, byte for byte."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from o_contracts.system_prompt import (
    compile_system,
    recompiled_at,
    render_blocks,
    render_metadata,
)

HUMAN: dict[str, Any] = {
    "label": "human",
    "description": "What I know about the user.",
    "value": "Name: Ada",
    "limit": 5000,
    "read_only": False,
}
PERSONA: dict[str, Any] = {
    "label": "persona",
    "description": "Who I am.",
    "value": "I am Sam.\nI like tea.",
    "limit": 2000,
    "read_only": True,
}

HUMAN_TEXT = (
    "<human>\n"
    "<description>\n"
    "What I know about the user.\n"
    "</description>\n"
    "<metadata>\n"
    "- chars_current=9\n"
    "- chars_limit=5000\n"
    "</metadata>\n"
    "<value>\n"
    "Name: Ada\n"
    "</value>\n"
    "</human>\n"
)
PERSONA_TEXT = (
    "<persona>\n"
    "<description>\n"
    "Who I am.\n"
    "</description>\n"
    "<metadata>\n"
    "- read_only=true\n"
    "- chars_current=21\n"
    "- chars_limit=2000\n"
    "</metadata>\n"
    "<value>\n"
    "I am Sam.\n"
    "I like tea.\n"
    "</value>\n"
    "</persona>\n"
)
HEADER = (
    "<memory_blocks>\n"
    "The following memory blocks are currently engaged in your core memory unit:\n\n"
)


def test_empty_blocks_render_nothing() -> None:
    assert render_blocks([]) == ""


def test_one_block_exact() -> None:
    assert render_blocks([HUMAN]) == HEADER + HUMAN_TEXT + "\n</memory_blocks>"


def test_one_block_matches_letta_literal() -> None:
    assert render_blocks([HUMAN]) == (
        "<memory_blocks>\n"
        "The following memory blocks are currently engaged in your core memory unit:\n"
        "\n"
        "<human>\n<description>\nWhat I know about the user.\n</description>\n"
        "<metadata>\n- chars_current=9\n- chars_limit=5000\n</metadata>\n"
        "<value>\nName: Ada\n</value>\n</human>\n"
        "\n"
        "</memory_blocks>"
    )


def test_two_blocks_exact_with_blank_line_between() -> None:
    assert render_blocks([HUMAN, PERSONA]) == (
        HEADER + HUMAN_TEXT + "\n" + PERSONA_TEXT + "\n</memory_blocks>"
    )


def test_block_order_is_kept() -> None:
    text = render_blocks([PERSONA, HUMAN])
    assert text.index("<persona>") < text.index("<human>")
    assert text == HEADER + PERSONA_TEXT + "\n" + HUMAN_TEXT + "\n</memory_blocks>"


def test_read_only_comes_first_in_metadata() -> None:
    text = render_blocks([PERSONA])
    assert "<metadata>\n- read_only=true\n- chars_current=21\n- chars_limit=2000\n</metadata>" in (
        text
    )
    assert "read_only" not in render_blocks([HUMAN])


def test_missing_or_none_description_renders_empty() -> None:
    no_desc = {k: v for k, v in HUMAN.items() if k != "description"}
    none_desc = HUMAN | {"description": None}
    expected = HEADER + HUMAN_TEXT.replace("What I know about the user.", "") + "\n</memory_blocks>"
    assert render_blocks([no_desc]) == expected
    assert render_blocks([none_desc]) == expected


def test_empty_value_block() -> None:
    text = render_blocks([HUMAN | {"value": ""}])
    assert "- chars_current=0\n" in text
    assert "<value>\n\n</value>" in text


def test_chars_current_counts_characters_not_bytes() -> None:
    text = render_blocks([HUMAN | {"value": "héllo ✓"}])
    assert "- chars_current=7\n" in text


def test_render_metadata_names_the_conversation() -> None:
    now = datetime(2025, 3, 4, 15, 6, 7, tzinfo=UTC)
    text = render_metadata("agent-1", 0, now, conversation_id="conv-9")
    assert "- CONVERSATION_ID: conv-9\n" in text


def test_render_metadata() -> None:
    now = datetime(2025, 3, 4, 15, 6, 7, tzinfo=UTC)
    assert render_metadata("agent-1", 12, now) == (
        "<memory_metadata>\n"
        "- AGENT_ID: agent-1\n"
        "- CONVERSATION_ID: default\n"
        "- System prompt last recompiled: 2025-03-04 03:06:07 PM UTC+0000\n"
        "- 12 previous messages between you and the user are stored in recall memory\n"
        "</memory_metadata>"
    )


def test_a_compiled_prompt_tells_when_it_was_compiled() -> None:
    now = datetime(2025, 3, 4, 15, 6, 7, tzinfo=UTC)
    assert recompiled_at(compile_system("You are Sam.", "agent-7", [HUMAN], 3, now=now)) == now
    assert recompiled_at("You are Sam.") is None
    assert recompiled_at("- System prompt last recompiled: yesterday\n") is None


META_RE = (
    r"<memory_metadata>\n- AGENT_ID: agent-7\n- CONVERSATION_ID: default\n"
    r"- System prompt last recompiled: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d [AP]M UTC\+0000\n"
    r"- 3 previous messages between you and the user are stored in recall memory\n"
    r"</memory_metadata>"
)


def test_compile_system_without_placeholder_appends() -> None:
    out = compile_system("You are Sam.", "agent-7", [HUMAN], 3)
    prefix = "You are Sam.\n\n" + render_blocks([HUMAN]) + "\n\n"
    assert out.startswith(prefix)
    assert re.fullmatch(META_RE, out[len(prefix) :])


def test_compile_system_with_placeholder_substitutes() -> None:
    out = compile_system("Before\n{CORE_MEMORY}\nAfter", "agent-7", [HUMAN, PERSONA], 3)
    prefix = "Before\n" + render_blocks([HUMAN, PERSONA]) + "\n\n"
    assert out.startswith(prefix)
    assert out.endswith("\nAfter")
    assert re.fullmatch(META_RE, out[len(prefix) : -len("\nAfter")])
    assert "{CORE_MEMORY}" not in out


def test_compile_system_without_blocks_has_only_metadata() -> None:
    out = compile_system("You are Sam.", "agent-7", [], 3)
    assert out.startswith("You are Sam.\n\n<memory_metadata>\n")
    assert re.fullmatch(META_RE, out[len("You are Sam.\n\n") :])
    assert "<memory_blocks>" not in out


def test_compile_system_placeholder_without_blocks() -> None:
    out = compile_system("{CORE_MEMORY}", "agent-7", [], 3)
    assert re.fullmatch(META_RE, out)


def test_memory_metadata_lists_archival_memories_only_when_there_are_some() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    without = render_metadata("agent-1", 2, now)
    assert "archival" not in without
    with_archive = render_metadata("agent-1", 2, now, archival_count=3, archival_tags=["a", "b"])
    assert with_archive.splitlines()[-3:] == [
        "- 3 total memories you created are stored in archival memory (use tools to access them)",
        "- Available archival memory tags: a, b",
        "</memory_metadata>",
    ]
