"""An agent's folders and files: attach and detach (Letta's /folders/ and older /sources/
routes), list them, and open or close its files.

Attaching gives the agent the files tools and opens the folder's processed files (the
newest win within its max_files_open, as in Letta); opening and closing are decided by
the memory service (OpenFiles, CloseFiles), which owns what the agent sees.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from o_contracts.directories import limits_of, shown
from o_contracts.file_commands import CloseFiles, FileOpenRequest, OpenFiles
from o_contracts.ids import derived_id
from o_gateway.agent_reads import agent_state
from o_gateway.commands import memory_command
from o_gateway.folder_decisions import attach_folder, detach_folder
from o_gateway.folder_reads import agent_file_rows, agent_folder_rows, render_folder
from o_gateway.pagination import page_of
from o_gateway.render import iso
from o_gateway.routes.paths import route
from o_gateway.state import GW, Gateway, checked_id

router = APIRouter()
# Opening a folder's files may wait for the memory service to read them all.
OPEN_TIMEOUT = 30.0


async def open_folder_files(gw: Gateway, agent_id: str, folder_id: str) -> None:
    """Open the folder's processed files for the agent. The command's id derives from the
    attachment, so a client retrying the attach opens them once; if the gateway died
    before sending it, the retry sends it."""
    attached_seq = await gw.pool.fetchval(
        "SELECT attached_seq FROM agent_folders WHERE agent_id = $1 AND folder_id = $2",
        agent_id,
        folder_id,
    )
    if attached_seq is None:
        return
    await memory_command(
        gw,
        OpenFiles(agent_id=agent_id, folder_id=folder_id, strict=False),
        agent_id,
        timeout=OPEN_TIMEOUT,
        command_id=derived_id("cmd", agent_id, folder_id, "attached", str(attached_seq)),
    )


async def _attach(agent_id: str, folder_id: str, gw: Gateway) -> dict[str, Any]:
    checked_id(agent_id, "agent")
    checked_id(folder_id, "source")
    await attach_folder(gw, agent_id, folder_id)
    await open_folder_files(gw, agent_id, folder_id)
    return await agent_state(gw, agent_id)


async def _detach(agent_id: str, folder_id: str, gw: Gateway) -> dict[str, Any]:
    checked_id(agent_id, "agent")
    checked_id(folder_id, "source")
    await detach_folder(gw, agent_id, folder_id)
    return await agent_state(gw, agent_id)


# Each under Letta's two names: folders, and the older sources.
@route(router, "PATCH", "/v1/agents/{agent_id}/folders/attach/{folder_id}")
@route(router, "PATCH", "/v1/agents/{agent_id}/sources/attach/{folder_id}")
async def attach_folder_to_agent(agent_id: str, folder_id: str, gw: GW) -> dict[str, Any]:
    return await _attach(agent_id, folder_id, gw)


@route(router, "PATCH", "/v1/agents/{agent_id}/folders/detach/{folder_id}")
@route(router, "PATCH", "/v1/agents/{agent_id}/sources/detach/{folder_id}")
async def detach_folder_from_agent(agent_id: str, folder_id: str, gw: GW) -> dict[str, Any]:
    return await _detach(agent_id, folder_id, gw)


@route(router, "GET", "/v1/agents/{agent_id}/folders")
@route(router, "GET", "/v1/agents/{agent_id}/sources")
async def list_folders_for_agent(
    agent_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
) -> list[dict[str, Any]]:
    await gw.agent_row(checked_id(agent_id, "agent"))
    folders = [render_folder(r) for r in await agent_folder_rows(gw, agent_id)]
    return page_of(folders, lambda f: str(f["id"]), before, after, order, limit)


@route(router, "GET", "/v1/agents/{agent_id}/files")
async def list_files_for_agent(
    agent_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
    cursor: str | None = None,
    is_open: bool | None = None,
) -> dict[str, Any]:
    """The processed files of the agent's folders, open or closed (Letta's
    PaginatedAgentFiles); `id` is the agent-file pair's."""
    row = await gw.agent_row(checked_id(agent_id, "agent"))
    char_limit = limits_of(row["llm_config"])[1]
    files = [
        {
            "id": derived_id("file_agent", agent_id, r["file_id"]),
            "file_id": r["file_id"],
            "file_name": r["file_name"],
            "folder_id": r["folder_id"],
            "folder_name": r["folder_name"],
            "is_open": r["is_open"],
            "last_accessed_at": iso(r["last_accessed_at"]),
            "visible_content": shown(r["visible_content"], char_limit) if r["is_open"] else None,
            "start_line": r["start_line"],
            "end_line": r["end_line"],
        }
        for r in await agent_file_rows(gw, agent_id)
        if is_open is None or r["is_open"] == is_open
    ]
    page = page_of(files, lambda f: str(f["id"]), before, after or cursor, order, limit + 1)
    more = len(page) > limit
    page = page[:limit]
    return {
        "files": page,
        "next_cursor": page[-1]["id"] if more and page else None,
        "has_more": more,
    }


@route(router, "PATCH", "/v1/agents/{agent_id}/files/close-all")
async def close_all_files_for_agent(agent_id: str, gw: GW) -> list[str]:
    await gw.agent_row(checked_id(agent_id, "agent"))
    reply = await memory_command(gw, CloseFiles(agent_id=agent_id), agent_id)
    return list((reply.result or {}).get("closed", []))


@route(router, "PATCH", "/v1/agents/{agent_id}/files/{file_id}/open")
async def open_file_for_agent(agent_id: str, file_id: str, gw: GW) -> list[str]:
    """Opens the whole file; the names of the files closed to make room."""
    await gw.agent_row(checked_id(agent_id, "agent"))
    checked_id(file_id, "file")
    command = OpenFiles(agent_id=agent_id, files=[FileOpenRequest(file_id=file_id)])
    reply = await memory_command(gw, command, agent_id)
    return list((reply.result or {}).get("closed", []))


@route(router, "PATCH", "/v1/agents/{agent_id}/files/{file_id}/close")
async def close_file_for_agent(agent_id: str, file_id: str, gw: GW) -> dict[str, Any]:
    await gw.agent_row(checked_id(agent_id, "agent"))
    checked_id(file_id, "file")
    await memory_command(gw, CloseFiles(agent_id=agent_id, file_ids=[file_id]), agent_id)
    return {"message": f"File id={file_id} successfully closed"}
