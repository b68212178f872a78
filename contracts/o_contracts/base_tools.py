"""Built-in tools: their JSON schemas (what the model sees) and which agent types get them.

Memory tools are carried out by the memory service (the executor sends it a
`RunMemoryTool` command); `send_message` is handled by the loop itself.
"""

from __future__ import annotations

from typing import Any


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": props, "required": required},
    }


_LABEL = {
    "type": "string",
    "description": "Section of the memory to be edited, identified by its label.",
}

SCHEMAS: dict[str, dict[str, Any]] = {
    "send_message": _fn(
        "send_message",
        "Sends a message to the human user.",
        {
            "message": {
                "type": "string",
                "description": "Message contents. All unicode (including emojis) are supported.",
            }
        },
        ["message"],
    ),
    "conversation_search": _fn(
        "conversation_search",
        "Search prior conversation history using case-insensitive string matching.",
        {
            "query": {"type": "string", "description": "String to search for."},
            "limit": {"type": "integer", "description": "Maximum number of results to return."},
        },
        ["query"],
    ),
    "core_memory_append": _fn(
        "core_memory_append",
        "Append to the contents of core memory.",
        {
            "label": _LABEL,
            "content": {"type": "string", "description": "Content to write to the memory."},
        },
        ["label", "content"],
    ),
    "core_memory_replace": _fn(
        "core_memory_replace",
        "Replace the contents of core memory. To delete memories, use an empty string for new_content.",
        {
            "label": _LABEL,
            "old_content": {
                "type": "string",
                "description": "String to replace. Must be an exact match.",
            },
            "new_content": {"type": "string", "description": "Content to write to the memory."},
        },
        ["label", "old_content", "new_content"],
    ),
    "memory_insert": _fn(
        "memory_insert",
        "Insert text at a specific location in a memory block.",
        {
            "label": _LABEL,
            "new_string": {"type": "string", "description": "The text to insert."},
            "insert_line": {
                "type": "integer",
                "description": "The line number after which to insert the text (0 for the beginning, -1 for the end).",
            },
        },
        ["label", "new_string"],
    ),
    "memory_replace": _fn(
        "memory_replace",
        "Replace a specific string in a memory block with a new string. "
        "old_string must appear exactly once in the block.",
        {
            "label": _LABEL,
            "old_string": {
                "type": "string",
                "description": "The text to replace (must match exactly, once).",
            },
            "new_string": {"type": "string", "description": "The new text."},
        },
        ["label", "old_string", "new_string"],
    ),
    "memory_rethink": _fn(
        "memory_rethink",
        "Rewrite a memory block entirely with a new, reorganised version.",
        {
            "label": _LABEL,
            "new_memory": {"type": "string", "description": "The new memory contents."},
        },
        ["label", "new_memory"],
    ),
    "memory_finish_edits": _fn(
        "memory_finish_edits", "Call when you have finished editing memory.", {}, []
    ),
}

MEMORY_TOOLS = frozenset(
    {
        "core_memory_append",
        "core_memory_replace",
        "memory_insert",
        "memory_replace",
        "memory_rethink",
        "memory_finish_edits",
    }
)

BASE_TOOLS: dict[str, list[str]] = {
    "letta_v1_agent": ["conversation_search", "memory_replace", "memory_insert"],
    "memgpt_v2_agent": ["send_message", "conversation_search", "memory_replace", "memory_insert"],
    "memgpt_agent": [
        "send_message",
        "conversation_search",
        "core_memory_append",
        "core_memory_replace",
    ],
}


def openai_tools(names: list[str]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": SCHEMAS[n]} for n in names if n in SCHEMAS]
