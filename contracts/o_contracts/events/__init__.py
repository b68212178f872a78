"""Every event O appends to the log. Importing this package registers them all."""

from o_contracts.events.agents import (
    AgentCreated,
    AgentDeleted,
    AgentUpdated,
    BlockAttached,
    BlockDetached,
    ToolAttached,
    ToolDetached,
)
from o_contracts.events.archival import (
    MemoriesReflected,
    PassageDeleted,
    PassageInserted,
    PassagesAccessed,
)
from o_contracts.events.blocks import BlockCreated, BlockDeleted, BlockUpdated
from o_contracts.events.conversations import (
    ConversationCreated,
    ConversationDeleted,
    ConversationUpdated,
    MessagesReset,
    SystemPromptRecompiled,
)
from o_contracts.events.groups import (
    GroupCreated,
    GroupDeleted,
    GroupUpdated,
    SleeptimeTurnCounted,
)
from o_contracts.events.mcp_servers import (
    McpServerCreated,
    McpServerDeleted,
    McpServerToolsSynced,
    McpServerUpdated,
)
from o_contracts.events.runs import (
    ContextSummarized,
    LLMResponded,
    RunCancellationRequested,
    RunCompleted,
    RunQueued,
    RunStarted,
    ToolCallRequested,
    ToolReturned,
)
from o_contracts.events.sandbox import ToolExecuted, ToolExecutionFailed, ToolExecutionStarted
from o_contracts.events.tools import ToolCreated, ToolDeleted, ToolUpdated

__all__ = [
    "AgentCreated",
    "AgentDeleted",
    "AgentUpdated",
    "BlockAttached",
    "BlockCreated",
    "BlockDeleted",
    "BlockDetached",
    "BlockUpdated",
    "ContextSummarized",
    "ConversationCreated",
    "ConversationDeleted",
    "ConversationUpdated",
    "GroupCreated",
    "GroupDeleted",
    "GroupUpdated",
    "LLMResponded",
    "McpServerCreated",
    "McpServerDeleted",
    "McpServerToolsSynced",
    "McpServerUpdated",
    "MemoriesReflected",
    "MessagesReset",
    "PassageDeleted",
    "PassageInserted",
    "PassagesAccessed",
    "RunCancellationRequested",
    "RunCompleted",
    "RunQueued",
    "RunStarted",
    "SleeptimeTurnCounted",
    "SystemPromptRecompiled",
    "ToolAttached",
    "ToolCallRequested",
    "ToolCreated",
    "ToolDeleted",
    "ToolDetached",
    "ToolExecuted",
    "ToolExecutionFailed",
    "ToolExecutionStarted",
    "ToolReturned",
    "ToolUpdated",
]
