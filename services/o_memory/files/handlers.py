"""OpenFiles and CloseFiles: read an agent's files and views, decide (views.py), append.

Decisions read the folders projection on a connection checked to be at the agent's
file-views subject (o_runtime/reads.py) and append there with that position as the
expected sequence, so two opens that race are decided one after the other. The event's
id derives from the command's, and the projection remembers which command made it
(agent_file_effects): a command delivered again is answered from its record.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from o_contracts import subjects
from o_contracts.base import Reply
from o_contracts.directories import limits_of
from o_contracts.envelope import Envelope, decode
from o_contracts.events import FilesClosed, FilesOpened
from o_contracts.file_commands import CloseFiles, OpenFiles
from o_contracts.file_types import of_mime
from o_contracts.ids import derived_id
from o_contracts.projection_names import FOLDERS
from o_memory.files.views import AgentFile, Decision, OpenView, Refused, open_bulk, open_strict
from o_runtime.commands import Delivery
from o_runtime.eventlog import AppendRejected
from o_runtime.service import Service

PRODUCER = "memory"

_FILES = (
    "SELECT f.id, f.file_name, f.folder_id, f.status, f.file_type FROM agent_folders af"
    " JOIN folder_files f ON f.folder_id = af.folder_id WHERE af.agent_id = $1"
    " ORDER BY af.attached_seq, f.created_at, f.id"
)
_VIEWS = (
    "SELECT v.file_id, f.file_name, v.start_line, v.end_line FROM agent_file_views v"
    " JOIN folder_files f ON f.id = v.file_id WHERE v.agent_id = $1 ORDER BY v.opened_seq"
)


async def agent_files(conn: asyncpg.Connection, agent_id: str) -> list[AgentFile]:
    return [
        AgentFile(
            r["id"], r["file_name"], r["folder_id"], r["status"], of_mime(r["file_type"]).view
        )
        for r in await conn.fetch(_FILES, agent_id)
    ]


async def open_views(conn: asyncpg.Connection, agent_id: str) -> list[OpenView]:
    return [
        OpenView(r["file_id"], r["file_name"], r["start_line"], r["end_line"])
        for r in await conn.fetch(_VIEWS, agent_id)
    ]


async def _with_text(
    conn: asyncpg.Connection, files: list[AgentFile], cmd: OpenFiles
) -> list[AgentFile]:
    """The requested files with their text (to check windows against)."""
    names = {r.file_name for r in cmd.files if r.file_name} | {
        r.file_id for r in cmd.files if r.file_id
    }
    wanted = [f.id for f in files if f.name in names or f.id in names]
    texts = {
        r["id"]: r["content"]
        for r in await conn.fetch("SELECT id, content FROM folder_files WHERE id = ANY($1)", wanted)
    }
    return [
        AgentFile(f.id, f.name, f.folder_id, f.status, f.strategy, texts.get(f.id))
        if f.id in texts
        else f
        for f in files
    ]


class FileViews:
    def __init__(self, service: Service) -> None:
        self.s = service

    async def _done(self, conn: asyncpg.Connection, command_id: str) -> int | None:
        seq: int | None = await conn.fetchval(
            "SELECT seq FROM agent_file_effects WHERE command_id = $1", command_id
        )
        return seq

    async def _recorded(self, seq: int) -> Reply:
        msg = await self.s.eventlog.js.get_msg(subjects.EVENTS_STREAM, seq, direct=True)
        event = decode(msg.data or b"").data
        if isinstance(event, FilesOpened):
            return Reply(
                ok=True, seq=seq, result={"message": event.summary, "closed": event.closed_names}
            )
        assert isinstance(event, FilesClosed)
        return Reply(ok=True, seq=seq, result={"closed": event.file_names})

    async def _max_open(self, conn: asyncpg.Connection, agent_id: str) -> int:
        row = await conn.fetchrow("SELECT llm_config FROM agents WHERE id = $1", agent_id)
        if row is None:
            raise AppendRejected(f"Agent {agent_id} not found", 404)
        return limits_of(row["llm_config"])[0]

    async def open_files(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        return await self.open(env, env.data)

    async def open(self, cause: Envelope[Any], cmd: OpenFiles, min_seq: int = 0) -> Reply:
        """Open `cmd`'s files once for `cause` (the command, or the event that asks for it:
        a file of an attached folder finished processing)."""
        subject = subjects.agent_files_subject(cmd.agent_id)
        decided: list[Decision] = []
        answered: list[Reply] = []

        async def decide(last: int) -> Envelope[Any] | None:
            decided.clear()
            async with self.s.reads.at(max(last, min_seq), FOLDERS) as conn:
                done = await self._done(conn, cause.id)
                if done is not None:
                    answered.append(await self._recorded(done))
                    return None
                max_open = await self._max_open(conn, cmd.agent_id)
                files = await agent_files(conn, cmd.agent_id)
                views = await open_views(conn, cmd.agent_id)
                if cmd.strict:
                    files = await _with_text(conn, files, cmd)
            try:
                decision = self._decide(cmd, files, views, max_open)
            except Refused as exc:
                raise AppendRejected(str(exc), exc.status) from exc
            # (Recorded even when it opens and closes nothing: delivered again after the
            # agent closed a file, its record answers it instead of opening it again.)
            decided.append(decision)
            return cause.caused(
                FilesOpened(
                    agent_id=cmd.agent_id,
                    opened=decision.opened,
                    closed=[v.file_id for v in decision.closed],
                    closed_names=[v.file_name for v in decision.closed],
                    summary=decision.summary,
                ),
                aggregate_id=cmd.agent_id,
                producer=PRODUCER,
                id=derived_id("evt", cause.id),
            )

        appended = await self.s.eventlog.append_decided(subject, decide)
        if answered:
            return answered[0]
        decision = decided[-1] if decided else Decision(opened=[])
        result = {"message": decision.summary, "closed": [v.file_name for v in decision.closed]}
        if appended is None:
            return Reply(ok=True, result=result)
        await self.s.watcher.wait(appended.seq, FOLDERS)
        return Reply(ok=True, seq=appended.seq, result=result)

    @staticmethod
    def _decide(
        cmd: OpenFiles, files: list[AgentFile], views: list[OpenView], max_open: int
    ) -> Decision:
        if cmd.strict:
            return open_strict(cmd.files, cmd.close_all_others, files, views, max_open)
        if cmd.folder_id is not None and not cmd.files:
            new = [f for f in files if f.folder_id == cmd.folder_id]
        else:
            ids = {r.file_id for r in cmd.files} | {r.file_name for r in cmd.files}
            new = [f for f in files if f.id in ids or f.name in ids]
        return open_bulk(new, views, max_open)

    async def close_files(self, env: Envelope[CloseFiles], delivery: Delivery) -> Reply:
        cmd = env.data
        subject = subjects.agent_files_subject(cmd.agent_id)
        closing: list[list[OpenView]] = []
        answered: list[Reply] = []

        async def decide(last: int) -> Envelope[Any] | None:
            closing.clear()
            async with self.s.reads.at(last, FOLDERS) as conn:
                done = await self._done(conn, env.id)
                if done is not None:
                    answered.append(await self._recorded(done))
                    return None
                files = await agent_files(conn, cmd.agent_id)
                views = await open_views(conn, cmd.agent_id)
            if cmd.file_ids is not None:
                attached = {f.id for f in files}
                unknown = [i for i in cmd.file_ids if i not in attached]
                if unknown:
                    raise AppendRejected(
                        f"File {unknown[0]} is not attached to agent {cmd.agent_id}", 404
                    )
            chosen = [v for v in views if cmd.file_ids is None or v.file_id in cmd.file_ids]
            # (Recorded even when nothing was open: delivered again after a file was
            # opened, its record answers it instead of closing that file.)
            closing.append(chosen)
            return env.caused(
                FilesClosed(
                    agent_id=cmd.agent_id,
                    file_ids=[v.file_id for v in chosen],
                    file_names=[v.file_name for v in chosen],
                ),
                aggregate_id=cmd.agent_id,
                producer=PRODUCER,
                id=derived_id("evt", env.id),
            )

        appended = await self.s.eventlog.append_decided(subject, decide)
        if answered:
            return answered[0]
        names = [v.file_name for v in (closing[-1] if closing else [])]
        if appended is None:
            return Reply(ok=True, result={"closed": names})
        await self.s.watcher.wait(appended.seq, FOLDERS)
        return Reply(ok=True, seq=appended.seq, result={"closed": names})
