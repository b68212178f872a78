"""Decisions on folders, made on checked reads and appended with the expected sequence.

A folder's subject holds its creation, changes, deletion and its files' uploads and
deletions, so file names are decided on the folder's state (a duplicate, Letta's
suffix). Attaching and detaching are agent registry changes, decided on the agent's
subject (o_runtime/reads.py: the rows read are at least as new as where they append).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from o_contracts import subjects
from o_contracts.base import Event
from o_contracts.base_tools import FILE_TOOLS
from o_contracts.envelope import Envelope
from o_contracts.events import FolderAttached, FolderDetached
from o_contracts.projection_names import AGENTS, FOLDERS
from o_gateway.commands import PRODUCER
from o_gateway.decisions import Refused
from o_gateway.state import Gateway

Decide = Callable[[asyncpg.Connection], Awaitable[Event | None]]


async def on_folder(gw: Gateway, folder_id: str, decide: Decide) -> int:
    """Append what `decide` makes of the folder's state; its log position (0: nothing)."""

    async def decided(last: int) -> Envelope[Any] | None:
        async with gw.reads.at(last, FOLDERS) as conn:
            event = await decide(conn)
        if event is None:
            return None
        return Envelope.wrap(event, aggregate_id=folder_id, producer=PRODUCER)

    appended = await gw.eventlog.append_decided(subjects.folder_subject(folder_id), decided)
    if appended is None:
        return 0
    await gw.visible(appended.seq, FOLDERS)
    return appended.seq


async def _agent_tools(conn: asyncpg.Connection, agent_id: str) -> list[str]:
    tools = await conn.fetchval("SELECT tools FROM agents WHERE id = $1", agent_id)
    if tools is None:
        raise Refused(f"Agent {agent_id} not found", 404)
    return list(tools)


async def _folder_exists(conn: asyncpg.Connection, folder_id: str) -> None:
    if not await conn.fetchval("SELECT 1 FROM folders WHERE id = $1", folder_id):
        raise Refused(f"Folder {folder_id} not found", 404)


async def _on_agent(gw: Gateway, agent_id: str, decide: Decide) -> int:
    async def decided(last: int) -> Envelope[Any] | None:
        async with gw.reads.at(last, AGENTS, FOLDERS) as conn:
            event = await decide(conn)
        if event is None:
            return None
        return Envelope.wrap(event, aggregate_id=agent_id, producer=PRODUCER)

    appended = await gw.eventlog.append_decided(subjects.agent_subject(agent_id), decided)
    if appended is None:
        return 0
    await gw.visible(appended.seq, AGENTS, FOLDERS)
    return appended.seq


async def attach_folder(gw: Gateway, agent_id: str, folder_id: str) -> int:
    """Attach the folder, giving the agent the files tools it lacks (as Letta does)."""

    async def decide(conn: asyncpg.Connection) -> Event | None:
        tools = await _agent_tools(conn, agent_id)
        await _folder_exists(conn, folder_id)
        if await conn.fetchval(
            "SELECT 1 FROM agent_folders WHERE agent_id = $1 AND folder_id = $2",
            agent_id,
            folder_id,
        ):
            return None
        missing = [t for t in FILE_TOOLS if t not in tools]
        return FolderAttached(
            agent_id=agent_id, folder_id=folder_id, tools=[*tools, *missing] if missing else None
        )

    return await _on_agent(gw, agent_id, decide)


async def detach_folder(gw: Gateway, agent_id: str, folder_id: str) -> int:
    """Detach the folder; the agent's last folder takes the files tools with it."""

    async def decide(conn: asyncpg.Connection) -> Event | None:
        tools = await _agent_tools(conn, agent_id)
        attached = [
            r["folder_id"]
            for r in await conn.fetch(
                "SELECT folder_id FROM agent_folders WHERE agent_id = $1", agent_id
            )
        ]
        if folder_id not in attached:
            return None
        kept = [t for t in tools if t not in FILE_TOOLS]
        last = attached == [folder_id]
        return FolderDetached(
            agent_id=agent_id,
            folder_id=folder_id,
            tools=kept if last and kept != tools else None,
        )

    return await _on_agent(gw, agent_id, decide)
