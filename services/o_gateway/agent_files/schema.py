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

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from o_contracts.limits import MAX_LABEL_CHARS
from o_contracts.pip_requirements import MAX_REQUIREMENTS, PipRequirement
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
MAX_FILE_FOLDERS = 64
MAX_FILE_FILES = 1024
MAX_FILE_SKILLS = 256

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
    pip_requirements: list[PipRequirement] | None = Field(default=None, max_length=MAX_REQUIREMENTS)


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


class FileAgentLink(Entry):
    """An agent's view of one file (Letta's FileAgentSchema). Letta's import attaches the
    files and opens them afresh, and so does O: only the references are read."""

    agent_id: FileRef
    file_id: FileRef
    source_id: FileRef
    is_open: bool = True


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
    # The folders it is attached to (Letta writes source_ids; folder_ids is the newer name).
    source_ids: FileRefs | None = None
    folder_ids: FileRefs | None = None
    files_agents: list[FileAgentLink] = Field(default_factory=list, max_length=MAX_FILE_FILES)

    @property
    def folder_refs(self) -> list[str]:
        """Every folder the agent has, in the file's order: those it names and those of
        its files."""
        refs = [*(self.source_ids or []), *(self.folder_ids or [])]
        refs += [link.source_id for link in self.files_agents]
        return list(dict.fromkeys(refs))


class FileGroup(Entry):
    id: FileRef
    agent_ids: FileRefs
    description: Description | None = None
    # round_robin, supervisor, dynamic, sleeptime (and Letta's voice_sleeptime, which
    # O does not serve); its other fields by type.
    manager_config: Object = Field(default_factory=lambda: {"manager_type": "round_robin"})
    shared_block_ids: FileRefs = Field(default_factory=list)


class FileMcpServer(Entry):
    """Letta's MCPServerSchema: a server's name and address, never its token or headers
    (Letta's export leaves them out, and a stdio server's env with them)."""

    id: FileRef
    server_type: str = Field(max_length=64)
    server_name: Name
    server_url: Annotated[str, StringConstraints(max_length=2048)] | None = None
    # stdio: Letta's StdioServerConfig (command, args; env if a file has one).
    stdio_config: Object | None = None
    metadata_: Object | None = None


class FileSource(Entry):
    """A folder (Letta's SourceSchema)."""

    id: FileRef
    name: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    description: Description | None = None
    instructions: Text | None = None
    metadata: Object | None = None
    embedding: Name | None = None
    embedding_chunk_size: int | None = Field(default=None, ge=16, le=2000)
    embedding_config: Object | None = None


class FileDocument(Entry):
    """A folder's file (Letta's FileSchema): its text as `content`, parsed where it was
    exported (a file still being processed there has none)."""

    id: FileRef
    source_id: FileRef
    file_name: Annotated[str, StringConstraints(max_length=1024)] | None = None
    original_file_name: Annotated[str, StringConstraints(max_length=1024)] | None = None
    file_type: Annotated[str, StringConstraints(max_length=256)] | None = None
    file_size: int | None = Field(default=None, ge=0)
    processing_status: Annotated[str, StringConstraints(max_length=64)] | None = None
    content: str | None = None


class FileSkill(Entry):
    """Letta's SkillSchema: what a client resolved and sent with its export. Letta's
    server keeps no skills and its import reads none (skills are the client's); O reads
    them only to refuse a malformed one."""

    name: Name
    files: dict[str, str] | None = None
    source_url: Name | None = None

    @model_validator(mode="after")
    def _files_or_source(self) -> FileSkill:
        if not (self.files and "SKILL.md" in self.files) and self.source_url is None:
            raise ValueError("Either files (with 'SKILL.md') or source_url must be provided")
        return self


class AgentFile(Entry):
    agents: list[FileAgent] = Field(min_length=1, max_length=MAX_FILE_AGENTS)
    groups: list[FileGroup] = Field(default_factory=list, max_length=MAX_FILE_GROUPS)
    blocks: list[FileBlock] = Field(default_factory=list, max_length=MAX_FILE_BLOCKS)
    tools: list[FileTool] = Field(default_factory=list, max_length=MAX_FILE_TOOLS)
    mcp_servers: list[FileMcpServer] = Field(default_factory=list, max_length=MAX_FILE_TOOLS)
    sources: list[FileSource] = Field(default_factory=list, max_length=MAX_FILE_FOLDERS)
    files: list[FileDocument] = Field(default_factory=list, max_length=MAX_FILE_FILES)
    skills: list[FileSkill] = Field(default_factory=list, max_length=MAX_FILE_SKILLS)
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
