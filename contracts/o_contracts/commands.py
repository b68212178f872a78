"""Commands: requests to the service that owns the decision.

Published to the commands stream with `Nats-Msg-Id` = the envelope id (so a
retried send is deduplicated) and, when the sender waits for the outcome, an
`O-Reply-To` header naming a core NATS inbox for the `Reply`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from o_contracts.base import Command
from o_contracts.models import BlockSpec, ChatMessage


class StartRun(Command):
    """Executor: run the agent on these input messages."""

    run_id: str
    agent_id: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_steps: int = Field(default=50, ge=1, le=1000)
    stream_tokens: bool = False


class CreateBlock(Command):
    """Memory: create a block (optionally for an agent being created)."""

    block_id: str
    spec: BlockSpec


class UpdateBlock(Command):
    """Memory: change a block's fields through the API (read_only does not apply)."""

    block_id: str
    changes: dict[str, Any]


class DeleteBlock(Command):
    block_id: str


class RunMemoryTool(Command):
    """Memory: an agent's memory tool call (memory_insert, core_memory_append, ...).

    Tool failures are answered as `Reply(ok=False, error=...)`, which the
    executor hands to the model as an error tool return.
    """

    agent_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]


class RestoreBlockVersion(Command):
    """Memory: make an earlier version of a block current again (a new BlockUpdated)."""

    block_id: str
    version: int = Field(ge=1)


class InsertPassage(Command):
    """Memory: add a passage to an agent's archival memory.

    Without `importance` the agent's LLM rates it (1-10); without `created_at`
    it is now.
    """

    agent_id: str
    passage_id: str
    text: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    created_at: datetime | None = None
    importance: int | None = Field(default=None, ge=1, le=10)


class DeletePassage(Command):
    agent_id: str
    passage_id: str


class ReflectOnMemories(Command):
    """Memory: the agent's recent memories passed the importance threshold; reflect."""

    agent_id: str
