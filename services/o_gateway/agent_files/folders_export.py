"""An agent's folders and files as an agent file carries them (Letta's SourceSchema,
FileSchema and FileAgentSchema), read from the memory service's `folders` projection.

As Letta's export: each folder attached to the agent, each of their files with its text
(`content`: the text the file was parsed into, what Letta's import chunks and embeds
again), and the agent's view of each processed file (`files_agents`: open or closed,
its window). A file not processed yet has no text: it is exported without one, as Letta
exports it. Unlike Letta (whose `sources` lists only folders that have files, while
`source_ids` names every attached one), every folder `source_ids` names is in the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from o_contracts.directories import limits_of, shown
from o_gateway.folder_reads import agent_file_rows, agent_folder_rows, file_metadata
from o_gateway.render import iso
from o_gateway.state import Gateway


class Ids(Protocol):
    def of(self, kind: str, o_id: str) -> str: ...


@dataclass
class AgentFolders:
    """What one agent has: its folders (rows, attach order) and its view of its files."""

    folders: list[dict[str, Any]] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)


async def agent_folders(gw: Gateway, agent_id: str) -> AgentFolders:
    return AgentFolders(await agent_folder_rows(gw, agent_id), await agent_file_rows(gw, agent_id))


async def files_of(gw: Gateway, folder_ids: list[str]) -> list[dict[str, Any]]:
    """The folders' files with their text, oldest first."""
    rows = await gw.pool.fetch(
        "SELECT id, folder_id, file_name, original_file_name, file_type, file_size, status,"
        " error_message, total_chunks, chunks_embedded, content FROM folder_files"
        " WHERE folder_id = ANY($1) ORDER BY created_at, id",
        folder_ids,
    )
    return [dict(r) for r in rows]


def render_source(ids: Ids, folder: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": folder["name"],
        "description": folder["description"],
        "instructions": folder["instructions"],
        "metadata": folder["metadata"],
        "embedding": None,
        "embedding_chunk_size": None,
        "embedding_config": folder["embedding_config"],
        "id": ids.of("source", folder["id"]),
    }


def render_file(ids: Ids, row: dict[str, Any]) -> dict[str, Any]:
    return {
        "source_id": ids.of("source", row["folder_id"]),
        "file_name": row["file_name"],
        **file_metadata(row),
        "content": row["content"],
        "id": ids.of("file", row["id"]),
    }


def render_links(
    ids: Ids, agent_file_id: str, agent_id: str, llm_config: Any, links: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    char_limit = limits_of(llm_config)[1]
    return [
        {
            "agent_id": agent_file_id,
            "file_id": ids.of("file", link["file_id"]),
            "source_id": ids.of("source", link["folder_id"]),
            "file_name": link["file_name"],
            "is_open": link["is_open"],
            "visible_content": shown(link["visible_content"], char_limit)
            if link["is_open"]
            else None,
            "last_accessed_at": iso(link["last_accessed_at"]),
            "start_line": link["start_line"],
            "end_line": link["end_line"],
            "id": ids.of("file_agent", f"{agent_id}/{link['file_id']}"),
        }
        for link in links
    ]
