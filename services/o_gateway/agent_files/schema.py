"""An agent file as O reads it: Letta's AgentFileSchema (letta/schemas/agent_file.py).

Fields O does not use are ignored (a file from a newer Letta still imports);
every field O uses is typed and bounded like the request that would create the
same thing (o_gateway/schemas.py), so a file cannot carry what a request could
not. Ids inside a file are the file's own (`agent-0`, `block-3`, `message-12`):
references between entities, replaced by O's ids when imported.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from o_contracts.limits import MAX_LABEL_CHARS
from o_gateway.schemas import (
    AgentName,
    BlockLimit,
    Description,
    Name,
    Object,
    Tags,
    Text,
    ToolRuleBody,
)

# How much one file may hold (beside O_MAX_BODY_BYTES, which bounds its bytes).
MAX_FILE_AGENTS = 64
MAX_FILE_BLOCKS = 1024
MAX_FILE_TOOLS = 512
MAX_FILE_MESSAGES = 10_000
MAX_FILE_GROUPS = 64
MAX_TOOL_SOURCE_CHARS = 200_000

# A reference to another entity of the same file.
FileRef = Annotated[str, StringConstraints(min_length=1, max_length=128)]
FileRefs = Annotated[list[FileRef], Field(max_length=MAX_FILE_TOOLS)]


class Entry(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FileBlock(Entry):
    id: FileRef
    label: str = Field(min_length=1, max_length=MAX_LABEL_CHARS)
    value: Text = ""
    limit: BlockLimit = 20000
    description: Description | None = None
    read_only: bool = False
    metadata: Object | None = None
    tags: Tags | None = None


class InlineBlock(Entry):
    """A block given inside an agent (CreateAgent.memory_blocks): created for it alone."""

    label: str = Field(min_length=1, max_length=MAX_LABEL_CHARS)
    value: Text = ""
    limit: BlockLimit = 20000
    description: Description | None = None
    read_only: bool = False
    metadata: Object | None = None


class FileTool(Entry):
    id: FileRef
    name: Name = Field(min_length=1)
    tool_type: str | None = Field(default=None, max_length=64)
    description: Description | None = None
    source_type: str | None = Field(default=None, max_length=64)
    source_code: str | None = Field(default=None, max_length=MAX_TOOL_SOURCE_CHARS)
    json_schema: Object | None = None
    tags: Tags | None = None
    return_char_limit: int | None = Field(default=None, ge=1, le=1_000_000)
    default_requires_approval: bool | None = None
    metadata_: Object | None = None


class FileFunction(Entry):
    name: Name
    arguments: Text = ""


class FileToolCall(Entry):
    id: Name
    function: FileFunction


class FileToolReturn(Entry):
    tool_call_id: Name | None = None
    status: Literal["success", "error"] = "success"
    stdout: list[Text] | None = None
    stderr: list[Text] | None = None
    func_response: Text | None = None


class FileApproval(Entry):
    """One answer in an approval message: Letta's ApprovalReturn or a ToolReturn."""

    type: str = "approval"
    tool_call_id: Name
    approve: bool | None = None
    reason: Text | None = None
    status: Literal["success", "error"] | None = None
    func_response: Text | None = None


Role = Literal["system", "user", "assistant", "tool", "function", "approval"]


class FileMessage(Entry):
    id: FileRef
    role: Role
    # A string, or Letta's content parts (text, reasoning, image, ...): read by
    # letta_messages.py, which skips the kinds O does not keep.
    content: Text | list[dict[str, Any]] | None = None
    name: Name | None = None
    tool_calls: list[FileToolCall] | None = None
    tool_call_id: Name | None = None
    tool_returns: list[FileToolReturn] | None = None
    created_at: datetime | None = None
    approve: bool | None = None
    approval_request_id: Name | None = None
    denial_reason: Text | None = None
    approvals: list[FileApproval] | None = None


class FileAgent(Entry):
    id: FileRef
    name: AgentName | None = None
    system: Text | None = None
    agent_type: str = "letta_v1_agent"
    llm_config: Object | None = None
    embedding_config: Object | None = None
    model: Name | None = None
    embedding: Name | None = None
    memory_blocks: list[InlineBlock] = Field(default_factory=list, max_length=64)
    block_ids: FileRefs | None = None
    tools: FileRefs | None = None  # tools by name (CreateAgent.tools)
    tool_ids: FileRefs | None = None
    tool_rules: list[ToolRuleBody] | None = Field(default=None, max_length=256)
    # CreateAgent's default: an agent file says False (Letta exports it so).
    include_base_tools: bool = True
    tags: Tags | None = None
    description: Description | None = None
    metadata: Object | None = None
    timezone: Annotated[str, StringConstraints(max_length=64)] | None = None
    tool_exec_environment_variables: dict[str, Annotated[str, Field(max_length=65536)]] | None = (
        None
    )
    secrets: dict[str, Annotated[str, Field(max_length=65536)]] | None = None
    enable_sleeptime: bool | None = None
    in_context_message_ids: FileRefs = Field(default_factory=list)
    messages: list[FileMessage] = Field(default_factory=list, max_length=MAX_FILE_MESSAGES)
    group_ids: FileRefs = Field(default_factory=list)


class FileGroup(Entry):
    id: FileRef
    agent_ids: FileRefs
    description: Description | None = None
    # round_robin, supervisor, dynamic, sleeptime (and Letta's voice_sleeptime, which
    # O does not serve); its other fields by type.
    manager_config: Object = Field(default_factory=lambda: {"manager_type": "round_robin"})
    shared_block_ids: FileRefs = Field(default_factory=list)


class FileMcpServer(Entry):
    id: FileRef
    server_type: str = Field(max_length=64)
    server_name: Name


class AgentFile(Entry):
    agents: list[FileAgent] = Field(min_length=1, max_length=MAX_FILE_AGENTS)
    groups: list[FileGroup] = Field(default_factory=list, max_length=MAX_FILE_GROUPS)
    blocks: list[FileBlock] = Field(default_factory=list, max_length=MAX_FILE_BLOCKS)
    tools: list[FileTool] = Field(default_factory=list, max_length=MAX_FILE_TOOLS)
    mcp_servers: list[FileMcpServer] = Field(default_factory=list, max_length=MAX_FILE_TOOLS)
    # Folders and their files, and skills: O does not import them (docs/agent-files.md).
    files: list[dict[str, Any]] = Field(default_factory=list)
    sources: list[dict[str, Any]] = Field(default_factory=list)
    skills: list[dict[str, Any]] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
