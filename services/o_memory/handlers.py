"""Memory commands: the memory service is the only writer of block events.

Every decision is made on the block's current state and appended with the
expected-last-subject-sequence check; a conflicting append is decided again
on fresh state. Replies are sent only after our own projection has applied
the event, so whoever waited reads its write.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from o_contracts import subjects
from o_contracts.base import Reply
from o_contracts.commands import (
    CreateBlock,
    DeleteBlock,
    RestoreBlockVersion,
    RunMemoryTool,
    UpdateBlock,
)
from o_contracts.envelope import Envelope
from o_contracts.events import BlockCreated, BlockDeleted, BlockUpdated
from o_contracts.ids import derived_id
from o_contracts.models import BlockSpec
from o_memory.blocks import agent_block_by_label, get_block
from o_memory.tools import BlockView, MemoryToolError, apply_edit
from o_runtime.eventlog import AppendRejected, ConcurrencyConflict
from o_runtime.service import Service

PRODUCER = "memory"
EDITABLE_FIELDS = {"label", "value", "limit", "description", "read_only", "metadata", "tags"}


class MemoryCommands:
    def __init__(self, service: Service) -> None:
        self.s = service

    async def _applied(self, seq: int) -> None:
        await self.s.watcher.wait(seq, "memory")

    async def _fresh_block(self, block_id: str, last_seq: int) -> dict[str, Any] | None:
        # The decision must see the block as of the subject's last event.
        await self._applied(last_seq)
        return await get_block(self.s.pool, block_id)

    async def create_block(self, env: Envelope[Any]) -> Reply:
        cmd: CreateBlock = env.data
        event = env.caused(
            BlockCreated(block_id=cmd.block_id, spec=cmd.spec),
            aggregate_id=cmd.block_id,
            producer=PRODUCER,
            id=derived_id("evt", env.id),
        )
        try:
            appended = await self.s.eventlog.append(
                subjects.block_subject(cmd.block_id), event, expected_last_seq=0
            )
        except ConcurrencyConflict:
            return Reply(ok=False, status=409, error=f"block {cmd.block_id} already exists")
        await self._applied(appended.seq)
        return Reply(ok=True, seq=appended.seq, result={"block_id": cmd.block_id})

    async def _label_free(self, block_id: str, label: str) -> None:
        """A block's label must stay unique on every agent that has the block."""
        clash = await self.s.pool.fetchval(
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

    async def update_block(self, env: Envelope[Any]) -> Reply:
        cmd: UpdateBlock = env.data
        unknown = set(cmd.changes) - EDITABLE_FIELDS
        if unknown:
            raise AppendRejected(f"unknown block field(s): {', '.join(sorted(unknown))}", 422)
        return await self._change(env, cmd.block_id, lambda _block: cmd.changes, None)

    async def restore_version(self, env: Envelope[Any]) -> Reply:
        """Bring back version n's fields as a new version; history is never rewritten."""
        cmd: RestoreBlockVersion = env.data
        rows = await self.s.pool.fetch(
            "SELECT version, changes FROM block_versions WHERE block_id = $1 AND version <= $2"
            " ORDER BY version",
            cmd.block_id,
            cmd.version,
        )
        if not rows or rows[-1]["version"] != cmd.version:
            raise AppendRejected(f"block {cmd.block_id} has no version {cmd.version}", 404)
        # Version 1 holds the whole spec; each later one only what changed.
        state: dict[str, Any] = {}
        for r in rows:
            state |= {k: v for k, v in r["changes"].items() if k in EDITABLE_FIELDS}

        def changes_for(block: dict[str, Any]) -> dict[str, Any]:
            return {f: v for f, v in state.items() if block[f] != v}

        return await self._change(env, cmd.block_id, changes_for, cmd.version)

    async def _change(
        self,
        env: Envelope[Any],
        block_id: str,
        changes_for: Any,
        restored_from: int | None,
    ) -> Reply:
        async def decide(last: int) -> Envelope[Any] | None:
            block = await self._fresh_block(block_id, last)
            if block is None:
                raise AppendRejected(f"block {block_id} not found", 404)
            changes: dict[str, Any] = changes_for(block)
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
                    400,
                )
            if "label" in changes and changes["label"] != block["label"]:
                await self._label_free(block_id, spec.label)
            return env.caused(
                BlockUpdated(
                    block_id=block_id,
                    version=block["version"] + 1,
                    changes=spec.model_dump(mode="json", include=set(changes)),
                    actor="api",
                    restored_from=restored_from,
                ),
                aggregate_id=block_id,
                producer=PRODUCER,
                id=derived_id("evt", env.id),
            )

        appended = await self.s.eventlog.append_decided(subjects.block_subject(block_id), decide)
        assert appended is not None
        await self._applied(appended.seq)
        return Reply(ok=True, seq=appended.seq, result={"block_id": block_id})

    async def delete_block(self, env: Envelope[Any]) -> Reply:
        cmd: DeleteBlock = env.data

        async def decide(last: int) -> Envelope[Any] | None:
            if await self._fresh_block(cmd.block_id, last) is None:
                raise AppendRejected(f"block {cmd.block_id} not found", 404)
            return env.caused(
                BlockDeleted(block_id=cmd.block_id),
                aggregate_id=cmd.block_id,
                producer=PRODUCER,
                id=derived_id("evt", env.id),
            )

        appended = await self.s.eventlog.append_decided(
            subjects.block_subject(cmd.block_id), decide
        )
        assert appended is not None
        await self._applied(appended.seq)
        return Reply(ok=True, seq=appended.seq)

    async def run_memory_tool(self, env: Envelope[Any]) -> Reply:
        cmd: RunMemoryTool = env.data
        if cmd.tool_name == "memory_finish_edits":
            return Reply(ok=True, result={"message": "Memory edits finished."})
        label = cmd.arguments.get("label")
        if not isinstance(label, str) or not label:
            return Reply(ok=False, error="missing required argument 'label'")
        found = await agent_block_by_label(self.s.pool, cmd.agent_id, label)
        if found is None:
            return Reply(ok=False, error=f"no memory block labelled '{label}' for this agent")
        block_id = found["id"]

        async def decide(last: int) -> Envelope[Any] | None:
            block = await self._fresh_block(block_id, last)
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
                    changes={"value": new_value},
                    actor="agent",
                    agent_id=cmd.agent_id,
                    tool_name=cmd.tool_name,
                ),
                aggregate_id=block_id,
                producer=PRODUCER,
                id=derived_id("evt", env.id),
            )

        appended = await self.s.eventlog.append_decided(subjects.block_subject(block_id), decide)
        assert appended is not None
        await self._applied(appended.seq)
        return Reply(
            ok=True,
            seq=appended.seq,
            result={"message": f"The core memory block with label `{label}` has been edited."},
        )
