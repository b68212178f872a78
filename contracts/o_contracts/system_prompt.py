"""The system prompt as a model sees it: the agent's instructions with its memory rendered.

Compiled by the executor at every step (so the model always sees memory as it
is), and by the gateway for the system message a conversation opens with
(what Letta shows as the conversation's first message).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from o_contracts.models import ClientSkill

# What the prompt calls the agent's default conversation (Letta's word).
DEFAULT_CONVERSATION = "default"


def render_blocks(blocks: list[dict[str, Any]]) -> str:
    """Letta's standard `<memory_blocks>` rendering, so prompts written for Letta fit."""
    if not blocks:
        return ""
    parts = [
        "<memory_blocks>\n"
        "The following memory blocks are currently engaged in your core memory unit:\n"
    ]
    for b in blocks:
        meta = []
        if b["read_only"]:
            meta.append("- read_only=true")
        meta.append(f"- chars_current={len(b['value'])}")
        meta.append(f"- chars_limit={b['limit']}")
        parts.append(
            f"<{b['label']}>\n<description>\n{b.get('description') or ''}\n</description>\n"
            f"<metadata>\n{chr(10).join(meta)}\n</metadata>\n"
            f"<value>\n{b['value']}\n</value>\n</{b['label']}>\n"
        )
    return "\n".join(parts) + "\n</memory_blocks>"


# How the prompt states when it was compiled (read back by `recompiled_at`).
_RECOMPILED = "- System prompt last recompiled: "
_RECOMPILED_FORMAT = "%Y-%m-%d %I:%M:%S %p %Z%z"


def recompiled_at(prompt: str) -> datetime | None:
    """When a prompt compiled here says it was compiled; None if it does not say."""
    start = prompt.find(_RECOMPILED)
    if start < 0:
        return None
    line = prompt[start + len(_RECOMPILED) :].split("\n", 1)[0].strip()
    try:
        return datetime.strptime(line, _RECOMPILED_FORMAT)
    except ValueError:
        return None


def render_metadata(
    agent_id: str,
    recall_count: int,
    now: datetime | None = None,
    archival_count: int = 0,
    archival_tags: Sequence[str] = (),
    conversation_id: str | None = None,
) -> str:
    now = now or datetime.now(UTC)
    lines = [
        f"- AGENT_ID: {agent_id}",
        f"- CONVERSATION_ID: {conversation_id or DEFAULT_CONVERSATION}",
        f"{_RECOMPILED}{now.strftime(_RECOMPILED_FORMAT)}",
        f"- {recall_count} previous messages between you and the user are stored in recall memory",
    ]
    # As Letta: archival lines only when there is something to find.
    if archival_count:
        lines.append(
            f"- {archival_count} total memories you created are stored in archival memory"
            " (use tools to access them)"
        )
    if archival_tags:
        lines.append(f"- Available archival memory tags: {', '.join(archival_tags)}")
    return "<memory_metadata>\n" + "\n".join(lines) + "\n</memory_metadata>"


def compile_system(
    system: str,
    agent_id: str,
    blocks: list[dict[str, Any]],
    recall_count: int,
    archival_count: int = 0,
    archival_tags: Sequence[str] = (),
    conversation_id: str | None = None,
    now: datetime | None = None,
    directories: str = "",
) -> str:
    """`directories`: the agent's folders and files, rendered (o_contracts/directories.py);
    they follow the memory blocks, as in Letta."""
    memory = render_blocks(blocks)
    if directories:
        memory = (memory + "\n\n" if memory else "") + directories
    full = (memory + "\n\n" if memory else "") + render_metadata(
        agent_id,
        recall_count,
        now,
        archival_count=archival_count,
        archival_tags=archival_tags,
        conversation_id=conversation_id,
    )
    if "{CORE_MEMORY}" in system:
        return system.replace("{CORE_MEMORY}", full)
    return f"{system}\n\n{full}"


def render_skills(skills: Sequence[ClientSkill]) -> str:
    """The client's skills for this request, in Letta's `<available_skills>` block.

    Request-scoped: added to the prompt sent to the model, never to a stored
    system message.
    """
    if not skills:
        return ""
    lines = ["<available_skills>"]
    for skill in skills:
        description = (skill.description or "").strip().split("\n")[0].strip()
        location = (skill.location or "").strip()
        lines.append(
            f"<skill>\n<name>{skill.name}</name>\n<description>{description}</description>"
            + (f"\n<location>{location}</location>" if location else "")
            + "\n</skill>"
        )
    lines.append("</available_skills>")
    return "\n".join(lines)
