"""Built-in tools: their JSON schemas (what the model sees) and which agent types get them.

Memory tools are carried out by the memory service (the executor sends it a
`RunMemoryTool` command); `send_message` is handled by the loop itself; the
multi-agent tools send the other agent a `StartRun` (o_executor/multi_agent); the web
tools are run by the executor itself (o_executor/web), the code tools in the tool sandbox
(o_executor/code_runs.py).
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

_MESSAGE = {"type": "string", "description": "The message for the other agent."}
_OTHER_AGENT = {"type": "string", "description": "The id of the agent to send it to."}

# Exa's result kinds, as Letta's web_search offers them.
_SEARCH_CATEGORIES = (
    "company",
    "research paper",
    "news",
    "pdf",
    "github",
    "tweet",
    "personal site",
    "linkedin profile",
    "financial report",
)

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
        "Search prior conversation history, including messages no longer in your context "
        "window, by words (full-text, any word may match).",
        {
            "query": {"type": "string", "description": "String to search for."},
            "roles": {
                "type": "array",
                "items": {"type": "string", "enum": ["user", "assistant", "tool", "system"]},
                "description": "Only messages from these roles (default: user and assistant).",
            },
            "limit": {"type": "integer", "description": "Maximum number of results to return."},
            "start_date": {
                "type": "string",
                "description": "Only messages at or after this ISO 8601 date/time.",
            },
            "end_date": {
                "type": "string",
                "description": "Only messages at or before this ISO 8601 date/time.",
            },
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
    "memory_apply_patch": _fn(
        "memory_apply_patch",
        "Apply a simplified unified-diff style patch to a memory block, anchored on content "
        "and context (not line numbers). Hunks may start with '@@'; lines start with ' ' "
        "(context, must match), '-' (remove, must match) or '+' (add). Each hunk's context "
        "must occur exactly once; if any hunk fails, nothing is changed.",
        {
            "label": _LABEL,
            "patch": {"type": "string", "description": "The patch text."},
        },
        ["label", "patch"],
    ),
    "archival_memory_insert": _fn(
        "archival_memory_insert",
        "Add information to long-term archival memory, for later retrieval with "
        "archival_memory_search. Write self-contained facts.",
        {
            "content": {"type": "string", "description": "Content to write to the memory."},
            "tags": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Optional tags for filtering later searches.",
            },
        },
        ["content"],
    ),
    "archival_memory_search": _fn(
        "archival_memory_search",
        "Search archival memory by meaning and by exact words; results are ranked by "
        "relevance, importance and recency.",
        {
            "query": {"type": "string", "description": "What to search for."},
            "tags": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only memories with these tags.",
            },
            "tag_match_mode": {
                "type": "string",
                "enum": ["any", "all"],
                "description": "Match any of the tags (default) or all of them.",
            },
            "top_k": {"type": "integer", "description": "How many results (default 10)."},
            "start_datetime": {
                "type": "string",
                "description": "Only memories created at or after this ISO 8601 time.",
            },
            "end_datetime": {
                "type": "string",
                "description": "Only memories created at or before this ISO 8601 time.",
            },
        },
        ["query"],
    ),
    "memory_finish_edits": _fn(
        "memory_finish_edits", "Call when you have finished editing memory.", {}, []
    ),
    "send_message_to_agent_and_wait_for_reply": _fn(
        "send_message_to_agent_and_wait_for_reply",
        "Send a message to another agent and wait for its reply. The other agent is told "
        "who sent it, so there is no need to introduce yourself. Use it when you expect an "
        "answer.",
        {
            "message": _MESSAGE,
            "other_agent_id": _OTHER_AGENT,
        },
        ["message", "other_agent_id"],
    ),
    "send_message_to_agents_matching_tags": _fn(
        "send_message_to_agents_matching_tags",
        "Send a message to every other agent that has all the tags in `match_all` and at "
        "least one of the tags in `match_some`, and wait for their replies. Returns one "
        "entry per agent that was sent the message.",
        {
            "message": _MESSAGE,
            "match_all": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Tags an agent must all have to be sent the message.",
            },
            "match_some": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Tags of which an agent must have at least one.",
            },
        },
        ["message", "match_all", "match_some"],
    ),
    "send_message_to_agent_async": _fn(
        "send_message_to_agent_async",
        "Send a message to another agent without waiting for a reply (a one-way "
        "notification). The other agent is told who sent it.",
        {
            "message": _MESSAGE,
            "other_agent_id": _OTHER_AGENT,
        },
        ["message", "other_agent_id"],
    ),
    # O's own: evolution in the agent's hands (issue 20, docs/evolution.md). Carried out by
    # the evolution service (RunEvolutionTool), on the agent's behalf or, for a sleep-time
    # companion, on its primary's.
    "evolution_performance_report": _fn(
        "evolution_performance_report",
        "Report how your recent runs went: stop reasons, error and tool-error rates, steps,"
        " tokens, latency and user feedback, by slice (tools used, stop reason, feedback,"
        " conversation), the current version against the previous one, and which earlier"
        " proposals touched which fields. The same digest proposals are drafted from.",
        {
            "runs": {
                "type": "integer",
                "description": "How many recent runs to read (default 30, at most 200).",
            }
        },
        [],
    ),
    "evolution_status": _fn(
        "evolution_status",
        "Your evolution status: the version you serve, the experiment in progress (its"
        " evidence so far and canary weight), the last decisions and the budget left.",
        {},
        [],
    ),
    "evolution_propose_change": _fn(
        "evolution_propose_change",
        "Propose a small change to yourself as itemised edits with a rationale. It is never"
        " applied directly: it is checked, tried in the shadow on your recorded runs, judged,"
        " and served only if the evidence (and the operator) accepts it.",
        {
            "ops": {
                "type": "array",
                "description": "Edits, in order. Each is one of: "
                '{"op": "replace_text", "target": "system" or "block:<label>", "old": "...",'
                ' "new": "..."}; {"op": "append_text", "target": ..., "text": "..."};'
                ' {"op": "add_tool", "name": "..."}; {"op": "remove_tool", "name": "..."};'
                ' {"op": "set_model_setting", "key": "temperature", "value": 0.2}.',
                "items": {"type": "object"},
            },
            "rationale": {
                "type": "string",
                "description": "Why: what in your runs this change should improve.",
            },
        },
        ["ops", "rationale"],
    ),
    "evolution_rollback": _fn(
        "evolution_rollback",
        "Go back to an earlier version of yourself that was once served, from the next"
        " request on. Recorded with your reason.",
        {
            "version_id": {"type": "string", "description": "The version to serve again."},
            "reason": {"type": "string", "description": "Why you roll back."},
        },
        ["version_id", "reason"],
    ),
    # The files tools (Letta's FILES_TOOLS): an agent gets them when a folder is attached.
    "open_files": _fn(
        "open_files",
        "Open one or more files and load their contents into the files section of your"
        " core memory. At most max_files_open files can be open at once; opening more"
        " closes the least recently used ones. Use it to read a file, or a window of its"
        " lines (offset and length), or to replace the open files with a new set"
        " (close_all_others=true).",
        {
            "file_requests": {
                "type": "array",
                "description": "The files to open, each with an optional window of lines.",
                "items": {
                    "type": "object",
                    "properties": {
                        "file_name": {
                            "type": "string",
                            "description": "Name of the file to open, as listed in your"
                            " directories (e.g. 'project/notes.md').",
                        },
                        "offset": {
                            "type": "integer",
                            "description": "Optional first line to show (0-indexed); the"
                            " file's start if omitted.",
                        },
                        "length": {
                            "type": "integer",
                            "description": "Optional number of lines to show from offset;"
                            " to the end if omitted.",
                        },
                    },
                    "required": ["file_name"],
                },
            },
            "close_all_others": {
                "type": "boolean",
                "description": "Close every other open file first (default false).",
            },
        },
        ["file_requests"],
    ),
    "grep_files": _fn(
        "grep_files",
        "Search the contents of your files for a keyword or regular expression, with"
        " lines of context around each match. Shows 20 matches per call, with a summary of"
        " how many matches each file has; call again with offset to see the next ones.",
        {
            "pattern": {
                "type": "string",
                "description": "Keyword or regular expression to search for (case-insensitive).",
            },
            "include": {
                "type": "string",
                "description": "Optional keyword, glob or regular expression the file names"
                " to search must match.",
            },
            "context_lines": {
                "type": "integer",
                "description": "Lines of context before and after each match (default 1).",
            },
            "offset": {
                "type": "integer",
                "description": "How many matches to skip (for the next page: 20, 40 ...).",
            },
        },
        ["pattern"],
    ),
    "semantic_search_files": _fn(
        "semantic_search_files",
        "Search your files by meaning rather than exact words: finds passages about a"
        " topic without knowing the words they use.",
        {
            "query": {"type": "string", "description": "What to look for."},
            "limit": {
                "type": "integer",
                "description": "Maximum number of passages to return (default 5).",
            },
        },
        ["query"],
    ),
    # Letta's built-in web tools (its `letta_builtin` type), run by the executor
    # (o_executor/web/): the parameters are Letta's, so agents and clients made for
    # Letta call them unchanged.
    "web_search": _fn(
        "web_search",
        "Search the web (Exa's search engine) and get, for each result, its title, address,"
        " date, author, the passages most relevant to the query and a summary.",
        {
            "query": {"type": "string", "description": "What to search for."},
            "num_results": {
                "type": "integer",
                "description": "How many results to return, 1 to 100 (default 10).",
            },
            "category": {
                "type": "string",
                "enum": list(_SEARCH_CATEGORIES),
                "description": "Only results of this kind.",
            },
            "include_text": {
                "type": "boolean",
                "description": "Also return each page's whole text (default false: it can"
                " fill the context window).",
            },
            "include_domains": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Only results from these domains.",
            },
            "exclude_domains": {
                "type": "array",
                "items": {"type": "string"},
                "description": "No results from these domains.",
            },
            "start_published_date": {
                "type": "string",
                "description": "Only pages published on or after this ISO 8601 date.",
            },
            "end_published_date": {
                "type": "string",
                "description": "Only pages published on or before this ISO 8601 date.",
            },
            "user_location": {
                "type": "string",
                "description": "Two-letter country code to localise results for (e.g. US).",
            },
        },
        ["query"],
    ),
    # Letta's code tools (letta_builtin too), run in O's tool sandbox (o_executor/code_runs.py).
    "run_code": _fn(
        "run_code",
        "Run code in a sandbox and get its output: printed lines, errors, and the value of"
        " its last line if that is an expression. This server runs Python only.",
        {
            "code": {"type": "string", "description": "The code to run."},
            "language": {
                "type": "string",
                "enum": ["python", "js", "ts", "r", "java"],
                "description": "The code's language (only python runs here).",
            },
        },
        ["code", "language"],
    ),
    "run_code_with_tools": _fn(
        "run_code_with_tools",
        "Run Python code that may call your own tools by name, in a sandbox, and get its"
        " output: printed lines, errors, and the value of its last line if that is an"
        " expression.",
        {"code": {"type": "string", "description": "The Python code to run."}},
        ["code"],
    ),
    "fetch_webpage": _fn(
        "fetch_webpage",
        "Read a web page (http or https) as markdown text: its main content, without"
        " menus and footers.",
        {"url": {"type": "string", "description": "The page's address."}},
        ["url"],
    ),
}

# The files tools, in Letta's order: carried out by the memory service
# (o_executor/file_calls.py); attaching a folder gives them to the agent.
FILE_TOOLS = ("open_files", "grep_files", "semantic_search_files")

# Letta's built-in web tools (ToolType letta_builtin): given by name, as Letta Code does.
WEB_TOOLS = ("web_search", "fetch_webpage")
# Letta's built-in code tools (letta_builtin too): run in the tool sandbox.
CODE_TOOLS = ("run_code", "run_code_with_tools")

# Evolution in the agent's own hands: given when its evolution is on (see above).
EVOLUTION_TOOLS = (
    "evolution_performance_report",
    "evolution_status",
    "evolution_propose_change",
    "evolution_rollback",
)

MEMORY_TOOLS = frozenset(
    {
        "core_memory_append",
        "core_memory_replace",
        "memory_insert",
        "memory_replace",
        "memory_rethink",
        "memory_finish_edits",
        "memory_apply_patch",
    }
)

# One agent messaging others (Letta's MULTI_AGENT_TOOLS, in its order): given to an agent
# by name or id, or all three with `include_multi_agent_tools` on create.
MULTI_AGENT_TOOLS = (
    "send_message_to_agent_and_wait_for_reply",
    "send_message_to_agents_matching_tags",
    "send_message_to_agent_async",
)

# Carried out by the memory service's archival memory (commands and search requests).
ARCHIVAL_TOOLS = frozenset({"archival_memory_insert", "archival_memory_search"})

BASE_TOOLS: dict[str, list[str]] = {
    "letta_v1_agent": ["conversation_search", "memory_replace", "memory_insert"],
    "memgpt_v2_agent": [
        "send_message",
        "conversation_search",
        "memory_replace",
        "memory_insert",
        "archival_memory_insert",
        "archival_memory_search",
    ],
    "memgpt_agent": [
        "send_message",
        "conversation_search",
        "core_memory_append",
        "core_memory_replace",
        "archival_memory_insert",
        "archival_memory_search",
    ],
    # A sleep-time companion edits the memory it shares with its primary, and says
    # when it is done (a terminal rule: SLEEPTIME_RULES).
    "sleeptime_agent": ["memory_replace", "memory_insert", "memory_rethink", "memory_finish_edits"],
}

# An agent with enable_sleeptime leaves memory edits to its companion (Letta's set).
SLEEPTIME_PRIMARY_TOOLS = ["send_message", "conversation_search", "archival_memory_search"]
# The tools a primary gives up when its companion takes memory over.
MEMORY_EDIT_TOOLS = MEMORY_TOOLS | {"archival_memory_insert"}
SLEEPTIME_RULES: list[dict[str, str]] = [{"type": "exit_loop", "tool_name": "memory_finish_edits"}]


def openai_tools(names: list[str]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": SCHEMAS[n]} for n in names if n in SCHEMAS]
