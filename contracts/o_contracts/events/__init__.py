"""Every event O appends to the log. Importing this package registers them all."""

from o_contracts.events.agents import (
    AgentCreated,
    AgentDeleted,
    AgentUpdated,
    BlockAttached,
    BlockDetached,
)
from o_contracts.events.archival import (
    MemoriesReflected,
    PassageDeleted,
    PassageInserted,
    PassagesAccessed,
)
from o_contracts.events.blocks import BlockCreated, BlockDeleted, BlockUpdated
from o_contracts.events.runs import LLMResponded, RunCompleted, RunStarted, ToolReturned

__all__ = [
    "AgentCreated",
    "AgentDeleted",
    "AgentUpdated",
    "BlockAttached",
    "BlockCreated",
    "BlockDeleted",
    "BlockDetached",
    "BlockUpdated",
    "LLMResponded",
    "MemoriesReflected",
    "PassageDeleted",
    "PassageInserted",
    "PassagesAccessed",
    "RunCompleted",
    "RunStarted",
    "ToolReturned",
]
