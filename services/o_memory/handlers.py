"""Memory commands: the memory service is the only writer of block events.

Every decision is made on the block as the log has it at the subject's last
sequence (the projection is checked to be there: o_runtime/reads.py) and
appended with that sequence as the expected last one; a conflicting append is
decided again on fresh state. A command that was done before (delivered again
after a lost ack) is answered with its recorded outcome and changes nothing.
Replies are sent only after our own projection has applied the event, so
whoever waited reads its write.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
from nats.js.errors import NotFoundError
from pydantic import ValidationError

from o_contracts import subjects
from o_contracts.base import Reply
from o_contracts.commands import (
    CreateBlock,
    DeleteBlock,
    EditBlockText,
    RestoreBlockVersion,
    RunMemoryTool,
    UpdateBlock,
)
from o_contracts.envelope import Envelope, MalformedMessage, decode
from o_contracts.events import BlockCreated, BlockDeleted, BlockUpdated
from o_contracts.events.blocks import ValueEdit
from o_contracts.ids import derived_id
from o_contracts.models import BlockSpec
from o_contracts.projection_names import MEMORY
from o_contracts.text_edits import TextEditRefused, apply_text_edits
from o_memory.blocks import BLOCK_COLUMNS
from o_memory.tools import BlockView, MemoryToolError, apply_edit
from o_runtime.commands import Delivery
from o_runtime.eventlog import AppendRejected, ConcurrencyConflict, Recorded
from o_runtime.service import Service

PRODUCER = "memory"
EDITABLE_FIELDS = {"label", "value", "limit", "description", "read_only", "metadata", "tags"}


# The block, and the version a command made if it made one (its BlockUpdated's
# causation id), in one round trip.
_BLOCK_AND_DONE = (
    "SELECT (SELECT seq FROM block_versions WHERE command_id = $2 LIMIT 1) AS done_seq, b.*"
    f" FROM (SELECT 1) one LEFT JOIN (SELECT {BLOCK_COLUMNS} FROM blocks) b ON b.id = $1"
)

# Which block an agent's label names (labels are unique per agent).
# A conversation's own block with the label first ($3), else the agent's.
_BLOCK_BY_LABEL = (
    "SELECT id FROM (SELECT b.id, 0 AS pref FROM blocks b WHERE b.id = ANY($3) AND b.label = $2"
    " UNION ALL SELECT b.id, 1 FROM agent_blocks ab JOIN blocks b ON b.id = ab.block_id"
    " WHERE ab.agent_id = $1 AND b.label = $2) found ORDER BY pref LIMIT 1"
)

# What a change to a block's fields is, given the block as it stands (read on `conn`).
ChangesFor = Callable[[asyncpg.Connection, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class Decided:
    """The outcome of deciding a command on the block's state."""

    # The recorded outcome's sequence when the command was done before.
    done_seq: int | None = None


class MemoryCommands:
    def __init__(self, service: Service) -> None:
        self.s = service

    async def _applied(self, seq: int) -> None:
        await self.s.watcher.wait(seq, MEMORY)

    @contextlib.asynccontextmanager
    async def _block_at(
        self, last: int, block_id: str, command_id: str
    ) -> AsyncIterator[tuple[asyncpg.Connection, dict[str, Any] | None, int | None]]:
        """As of log position `last`: a connection, the block (None if it does not
        exist) and the sequence of the version `command_id` made, if it made one."""
        async with self.s.reads.row_at(last, MEMORY, _BLOCK_AND_DONE, block_id, command_id) as (
            conn,
            row,
        ):
            block = dict(row) if row is not None else {"id": None, "done_seq": None}
            done_seq = block.pop("done_seq")
            yield conn, (block if block["id"] is not None else None), done_seq

    async def _recorded_on_subject(
        self, subject: str, command_id: str, first: bool
    ) -> Recorded | None:
        """The subject's first (or last) event, if this command caused it."""
        js = self.s.eventlog.js
        try:
            if first:
                msg = await js.get_msg(
                    subjects.EVENTS_STREAM, seq=1, subject=subject, next=True, direct=True
                )
            else:
                msg = await js.get_last_msg(subjects.EVENTS_STREAM, subject, direct=True)
            envelope = decode(msg.data or b"")
        except (NotFoundError, MalformedMessage):
            return None
        if envelope.causation_id != command_id:
            return None
        return Recorded(int(msg.seq or 0), subject, envelope)

    async def create_block(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: CreateBlock = env.data
        subject = subjects.block_subject(cmd.block_id)
        event = env.caused(
            BlockCreated(block_id=cmd.block_id, spec=cmd.spec),
            aggregate_id=cmd.block_id,
            producer=PRODUCER,
            id=derived_id("evt", env.id),
        )
        try:
            appended = await self.s.eventlog.append(subject, event, expected_last_seq=0)
            seq = appended.seq
        except ConcurrencyConflict:
            # This command created it before (its ack was lost), or someone else did.
            mine = await self._recorded_on_subject(subject, env.id, first=True)
            if mine is None:
                return Reply(ok=False, status=409, error=f"block {cmd.block_id} already exists")
            seq = mine.seq
        await self._applied(seq)
        return Reply(ok=True, seq=seq, result={"block_id": cmd.block_id})

    async def _label_free(self, conn: asyncpg.Connection, block_id: str, label: str) -> None:
        """A block's label must stay unique on every agent that has the block."""
        clash = await conn.fetchval(
            "SELECT mine.agent_id FROM agent_blocks mine"
            " JOIN agent_blocks other ON other.agent_id = mine.agent_id"
            " AND other.block_id <> mine.block_id"
            " JOIN blocks b ON b.id = other.block_id"
            " WHERE mine.block_id = $1 AND b.label = $2 LIMIT 1",
            block_id,
            label,
        )
        if clash:
            raise AppendRejected(f"agent {clash} already has a block labelled '{label}'", 409)

    async def update_block(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: UpdateBlock = env.data
        unknown = set(cmd.changes) - EDITABLE_FIELDS
        if unknown:
            raise AppendRejected(f"unknown block field(s): {', '.join(sorted(unknown))}", 422)

        async def changes_for(_conn: asyncpg.Connection, _block: dict[str, Any]) -> dict[str, Any]:
            return cmd.changes

        return await self._change(env, cmd.block_id, changes_for, None)

    async def edit_block_text(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        """A promoted patch's edits, made on the block's value as it is now (not as it was
        when the patch was proposed): an edit the agent made in between stays."""
        cmd: EditBlockText = env.data

        async def changes_for(_conn: asyncpg.Connection, block: dict[str, Any]) -> dict[str, Any]:
            try:
                return {"value": apply_text_edits(block["value"], cmd.edits)}
            except TextEditRefused as exc:
                raise AppendRejected(
                    f"block {block['label']} changed since the patch was made: {exc.reason}", 409
                ) from None

        return await self._change(env, cmd.block_id, changes_for, None)

    async def restore_version(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        """Bring back version n's fields as a new version; history is never rewritten."""
        cmd: RestoreBlockVersion = env.data

        async def changes_for(conn: asyncpg.Connection, block: dict[str, Any]) -> dict[str, Any]:
            rows = await conn.fetch(
                "SELECT version, changes FROM block_versions WHERE block_id = $1"
                " AND version <= $2 ORDER BY version",
                cmd.block_id,
                cmd.version,
            )
            if not rows or rows[-1]["version"] != cmd.version:
                raise AppendRejected(f"block {cmd.block_id} has no version {cmd.version}", 404)
            # Version 1 holds the whole spec; each later one only what changed.
            state: dict[str, Any] = {}
            for r in rows:
                state |= {k: v for k, v in r["changes"].items() if k in EDITABLE_FIELDS}
            return {f: v for f, v in state.items() if block[f] != v}

        return await self._change(env, cmd.block_id, changes_for, cmd.version)

    async def _change(
        self,
        env: Envelope[Any],
        block_id: str,
        changes_for: ChangesFor,
        restored_from: int | None,
    ) -> Reply:
        decided = Decided()

        async def decide(last: int) -> Envelope[Any] | None:
            async with self._block_at(last, block_id, env.id) as (conn, block, done):
                decided.done_seq = done
                if decided.done_seq is not None:
                    return None
                if block is None:
                    raise AppendRejected(f"block {block_id} not found", 404)
                changes = await changes_for(conn, block)
                merged = {f: block[f] for f in EDITABLE_FIELDS} | changes
                try:
                    spec = BlockSpec.model_validate(merged)
                except ValidationError as exc:
                    err = exc.errors()[0]
                    raise AppendRejected(f"{err['loc'][0]}: {err['msg']}", 422) from exc
                if len(spec.value) > spec.limit:
                    raise AppendRejected(
                        f"value is {len(spec.value)} characters, over the block's limit of "
                        f"{spec.limit}",
                        422,
                    )
                if "label" in changes and changes["label"] != block["label"]:
                    await self._label_free(conn, block_id, spec.label)
            fields = spec.model_dump(mode="json", include=set(changes))
            value = fields.pop("value", None)
            return env.caused(
                BlockUpdated(
                    block_id=block_id,
                    version=block["version"] + 1,
                    changes=fields,
                    value_edit=None if value is None else ValueEdit.between(block["value"], value),
                    actor="api",
                    restored_from=restored_from,
                ),
                aggregate_id=block_id,
                producer=PRODUCER,
                id=derived_id("evt", env.id),
            )

        appended = await self.s.eventlog.append_decided(subjects.block_subject(block_id), decide)
        seq = appended.seq if appended is not None else decided.done_seq
        assert seq is not None
        await self._applied(seq)
        return Reply(ok=True, seq=seq, result={"block_id": block_id})

    async def delete_block(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: DeleteBlock = env.data
        subject = subjects.block_subject(cmd.block_id)
        decided = Decided()

        async def decide(last: int) -> Envelope[Any] | None:
            async with self._block_at(last, cmd.block_id, env.id) as (_conn, block, _done):
                pass
            if block is None:
                mine = await self._recorded_on_subject(subject, env.id, first=False)
                if mine is not None:  # deleted by this command, before its ack was lost
                    decided.done_seq = mine.seq
                    return None
                raise AppendRejected(f"block {cmd.block_id} not found", 404)
            return env.caused(
                BlockDeleted(block_id=cmd.block_id),
                aggregate_id=cmd.block_id,
                producer=PRODUCER,
                id=derived_id("evt", env.id),
            )

        appended = await self.s.eventlog.append_decided(subject, decide)
        seq = appended.seq if appended is not None else decided.done_seq
        assert seq is not None
        await self._applied(seq)
        return Reply(ok=True, seq=seq)

    async def run_memory_tool(self, env: Envelope[Any], delivery: Delivery) -> Reply:
        cmd: RunMemoryTool = env.data
        if cmd.tool_name == "memory_finish_edits":
            return Reply(ok=True, result={"message": "Memory edits finished."})
        label = cmd.arguments.get("label")
        if not isinstance(label, str) or not label:
            return Reply(ok=False, error="missing required argument 'label'")
        edited = {"message": f"The core memory block with label `{label}` has been edited."}
        # Which block the label names, as of the agent's last event (attachments
        # and detachments are events of the agent).
        agent_last = await self.s.eventlog.last_seq(subjects.agent_subject(cmd.agent_id))
        async with self.s.reads.row_at(
            agent_last, MEMORY, _BLOCK_BY_LABEL, cmd.agent_id, label, cmd.isolated_block_ids
        ) as (_conn, found):
            pass
        if found is None:
            return Reply(ok=False, error=f"no memory block labelled '{label}' for this agent")
        block_id: str = found["id"]
        decided = Decided()

        async def decide(last: int) -> Envelope[Any] | None:
            async with self._block_at(last, block_id, env.id) as (_conn, block, done):
                decided.done_seq = done
            if decided.done_seq is not None:
                return None
            if block is None:
                raise AppendRejected(f"memory block '{label}' was deleted")
            view = BlockView(block["label"], block["value"], block["limit"], block["read_only"])
            try:
                new_value = apply_edit(cmd.tool_name, view, cmd.arguments)
            except MemoryToolError as exc:
                raise AppendRejected(str(exc)) from exc
            return env.caused(
                BlockUpdated(
                    block_id=block_id,
                    version=block["version"] + 1,
                    changes={},
                    # Only the span that changed: the log grows with the edit, not the block.
                    value_edit=ValueEdit.between(block["value"], new_value),
                    actor="agent",
                    agent_id=cmd.agent_id,
                    tool_name=cmd.tool_name,
                ),
                aggregate_id=block_id,
                producer=PRODUCER,
                id=derived_id("evt", env.id),
            )

        appended = await self.s.eventlog.append_decided(subjects.block_subject(block_id), decide)
        seq = appended.seq if appended is not None else decided.done_seq
        assert seq is not None
        await self._applied(seq)
        return Reply(ok=True, seq=seq, result=edited)
