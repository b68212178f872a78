"""Core memory block events, appended by the memory service on `o.evt.block.<block_id>`."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from o_contracts.base import Event
from o_contracts.models import BlockSpec, Value


class BlockCreated(Event):
    block_id: str
    spec: BlockSpec


class ValueEdit(Value):
    """A change to a block's value as one span: `delete` characters from `at` give way to `insert`.

    Positions count Unicode code points (Python's str, Postgres text in UTF-8).
    """

    at: int = Field(ge=0)
    delete: int = Field(ge=0)
    insert: str

    @classmethod
    def between(cls, old: str, new: str) -> ValueEdit:
        """The smallest single span that turns `old` into `new` (common head and tail kept)."""
        limit = min(len(old), len(new))
        # Binary searches over slice comparisons (C speed; a loop over
        # characters took ~0.5 ms for a block of a few thousand).
        low, high = 0, limit
        while low < high:
            mid = (low + high + 1) // 2
            if old[:mid] == new[:mid]:
                low = mid
            else:
                high = mid - 1
        head = low
        low, high = 0, limit - head
        while low < high:
            mid = (low + high + 1) // 2
            if old[len(old) - mid :] == new[len(new) - mid :]:
                low = mid
            else:
                high = mid - 1
        tail = low
        return cls(at=head, delete=len(old) - head - tail, insert=new[head : len(new) - tail])

    def applied_to(self, value: str) -> str:
        return value[: self.at] + self.insert + value[self.at + self.delete :]


class BlockUpdated(Event):
    """A new version of a block. `changes` holds only the fields that changed.

    Version 2: the memory service writes a change of the value as `value_edit`
    (the span that changed), not as the whole value in `changes`, so a block
    that grows by small edits grows the log linearly (each v1 event repeated
    the whole value: 4.7 -> 6.1 KB of events per message on an append-heavy
    block). `changes["value"]` (the whole value) is still read: v1 events
    have it, and it stays valid for other producers.
    """

    schema_version: ClassVar[int] = 2

    block_id: str
    version: int
    changes: dict[str, Any]
    value_edit: ValueEdit | None = None
    # Who changed it: the API (a person or program) or an agent's memory tool.
    actor: Literal["api", "agent"] = "api"
    agent_id: str | None = None
    tool_name: str | None = None
    # Set when this version brings back an earlier one (POST .../versions/{n}/restore).
    restored_from: int | None = None


class BlockDeleted(Event):
    block_id: str
