"""`o.rpc.memory.file_search` (core NATS, request/reply): an agent's grep_files or
semantic_search_files over the files of its folders. A read: nothing is recorded, so a
resumed run may ask again."""

from __future__ import annotations

from typing import Any, Literal

import msgpack
from pydantic import BaseModel, ConfigDict, Field

FileSearchTool = Literal["grep_files", "semantic_search_files"]


class SearchFiles(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_id: str
    tool: FileSearchTool
    # The tool's arguments as the model gave them (checked by the memory service).
    arguments: dict[str, Any] = Field(default_factory=dict)

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed


class FileSearchAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool
    # The tool's answer (ok), or why it failed (for the model to read).
    text: str

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed

    @classmethod
    def decode(cls, data: bytes) -> FileSearchAnswer:
        return cls.model_validate(msgpack.unpackb(data, raw=False))
