"""Commands to the memory service about folders' files.

`ProcessFile` goes to `o.cmd.files.<file_id>` (a work queue of its own: a long file never
holds up a memory edit); the memory service sends it itself when a FileUploaded is
appended (o_memory/files/uploads.py). `OpenFiles` and `CloseFiles` go to
`o.cmd.memory.<agent_id>`: the agent's open_files tool, Letta's open and close routes,
and attaching a folder open the agent's files through them.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from o_contracts.base import Command
from o_contracts.models import Value


class ProcessFile(Command):
    """Parse, chunk and embed an uploaded file, from wherever its processing stopped."""

    folder_id: str
    file_id: str


class FileOpenRequest(Value):
    """One file to open: by the name the agent sees ("folder/file.md"), or by id;
    `offset` (0-based line) and `length` (lines) pick a window, as Letta's
    FileOpenRequest."""

    file_name: str | None = None
    file_id: str | None = None
    offset: int | None = None
    length: int | None = None

    @model_validator(mode="after")
    def _named(self) -> FileOpenRequest:
        if (self.file_name is None) == (self.file_id is None):
            raise ValueError("a file to open is named by file_name or by file_id")
        return self


class OpenFiles(Command):
    """Open files for an agent, closing the least recently opened ones beyond its
    max_files_open.

    `strict` (the open_files tool and the open route): every file must be attached to the
    agent and every window valid, or nothing changes and the reply says why. Not strict
    (a folder attached, a file finished processing): files that cannot be opened are
    left out, and the newest files win over those open before, as Letta's bulk attach.
    With `folder_id` and no `files`, every processed file of that folder is opened.
    """

    agent_id: str
    files: list[FileOpenRequest] = Field(default_factory=list)
    folder_id: str | None = None
    close_all_others: bool = False
    strict: bool = True


class CloseFiles(Command):
    """Close some of an agent's open files, or all of them (`file_ids` None)."""

    agent_id: str
    file_ids: list[str] | None = None
