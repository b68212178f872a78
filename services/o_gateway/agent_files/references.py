"""A file's references between its own entities: each id once, each reference to one there.

Letta refuses a file whose ids repeat or whose references lead nowhere (its
AgentSerializationManager._validate_schema); so does O, with every problem
named, before anything is created.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from fastapi import HTTPException

from o_gateway.agent_files.schema import AgentFile

MAX_NAMED_PROBLEMS = 10


def check_references(file: AgentFile) -> None:
    """422 naming the problems, if there are any."""
    problems = list(_problems(file))
    if problems:
        shown = problems[:MAX_NAMED_PROBLEMS]
        more = len(problems) - len(shown)
        raise HTTPException(
            422,
            "the agent file is inconsistent: "
            + "; ".join(shown)
            + (f" (and {more} more)" if more else ""),
        )


def _problems(file: AgentFile) -> Iterable[str]:
    top = [
        ("agents", [a.id for a in file.agents]),
        ("blocks", [b.id for b in file.blocks]),
        ("tools", [t.id for t in file.tools]),
        ("groups", [g.id for g in file.groups]),
        ("mcp_servers", [s.id for s in file.mcp_servers]),
        ("sources", [s.id for s in file.sources]),
        ("files", [f.id for f in file.files]),
        ("messages", [m.id for a in file.agents for m in a.messages]),
    ]
    seen: Counter[str] = Counter()
    for kind, ids in top:
        for entity_id, count in Counter(ids).items():
            if count > 1:
                yield f"{kind} id '{entity_id}' is used {count} times"
        seen.update(set(ids))
    for entity_id, count in seen.items():
        if count > 1:
            yield f"id '{entity_id}' names entities of two kinds"
    agents = {a.id for a in file.agents}
    blocks = {b.id for b in file.blocks}
    tools = {t.id for t in file.tools}
    sources = {s.id for s in file.sources}
    files = {f.id: f for f in file.files}
    for f in file.files:
        yield from _missing(f"file {f.id}", "source", [f.source_id], sources)
    for agent in file.agents:
        where = f"agent {agent.id}"
        yield from _missing(where, "block", agent.block_ids or [], blocks)
        yield from _missing(where, "tool", agent.tool_ids or [], tools)
        yield from _missing(where, "source", agent.folder_refs, sources)
        for link in agent.files_agents:
            known = files.get(link.file_id)
            if known is None:
                yield f"{where} names file '{link.file_id}', which is not in the file"
            elif known.source_id != link.source_id:
                yield f"{where}: file '{link.file_id}' is not in source '{link.source_id}'"
            if link.agent_id != agent.id:
                yield f"{where}: a file link names another agent, '{link.agent_id}'"
        messages = {m.id for m in agent.messages}
        yield from _missing(where, "message", agent.in_context_message_ids, messages)
        for m in agent.messages:
            if m.role == "tool" and not m.tool_call_id and not m.tool_returns:
                yield f"{where}: tool message {m.id} names no tool call"
    for group in file.groups:
        where = f"group {group.id}"
        yield from _missing(where, "agent", group.agent_ids, agents)
        yield from _missing(where, "block", group.shared_block_ids, blocks)
        manager = group.manager_config.get("manager_agent_id")
        if manager is not None and manager not in agents:
            yield f"{where}: manager agent '{manager}' is not in the file"


def _missing(where: str, kind: str, refs: list[str], known: set[str]) -> Iterable[str]:
    for ref in refs:
        if ref not in known:
            yield f"{where} names {kind} '{ref}', which is not in the file"
