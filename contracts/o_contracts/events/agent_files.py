"""What an agent sees of folders.

FolderAttached and FolderDetached are agent registry events, appended by the gateway on
the agent's subject (`o.evt.agent.<agent_id>`), as ToolAttached is; they also carry the
agent's built-in tools when attaching gives it the file tools (open_files, grep_files,
semantic_search_files), so the registry and the attachment change in one event.

Which files the agent has open, and which lines of each, is decided by the memory
service and appended on `o.evt.agent_files.<agent_id>`: every file of an attached folder
shows in the agent's prompt, with its window of lines when it is open.
"""

from __future__ import annotations

from pydantic import Field

from o_contracts.base import Event
from o_contracts.models import Value


class FolderAttached(Event):
    agent_id: str
    folder_id: str
    # The agent's built-in tools once the file tools are added; None when it had them.
    tools: list[str] | None = None


class FolderDetached(Event):
    agent_id: str
    folder_id: str
    # The agent's built-in tools without the file tools (its last folder went); None
    # when they stay.
    tools: list[str] | None = None


class FileView(Value):
    """One open file and the lines shown of it: 1-based start, exclusive end (Letta's
    start_line and end_line); None for the file's start or end."""

    file_id: str
    file_name: str
    start_line: int | None = Field(default=None, ge=1)
    end_line: int | None = Field(default=None, ge=1)


class FilesOpened(Event):
    """Files opened (or their window moved) and the ones closed to stay within the
    agent's max_files_open (least recently opened first), as decided."""

    agent_id: str
    opened: list[FileView]
    closed: list[str] = Field(default_factory=list)  # file ids
    closed_names: list[str] = Field(default_factory=list)
    # What the one who asked was told (open_files' answer), kept so that the same
    # request delivered again is answered with it.
    summary: str = ""


class FilesClosed(Event):
    agent_id: str
    file_ids: list[str]
    file_names: list[str] = Field(default_factory=list)
