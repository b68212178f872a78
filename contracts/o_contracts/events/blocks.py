"""Core memory block events, appended by the memory service on `o.evt.block.<block_id>`."""

from __future__ import annotations

from typing import Any, Literal

from o_contracts.base import Event
from o_contracts.models import BlockSpec


class BlockCreated(Event):
    block_id: str
    spec: BlockSpec


class BlockUpdated(Event):
    """A new version of a block. `changes` holds only the fields that changed."""

    block_id: str
    version: int
    changes: dict[str, Any]
    # Who changed it: the API (a person or program) or an agent's memory tool.
    actor: Literal["api", "agent"] = "api"
    agent_id: str | None = None
    tool_name: str | None = None
    # Set when this version brings back an earlier one (POST .../versions/{n}/restore).
    restored_from: int | None = None


class BlockDeleted(Event):
    block_id: str
