"""Tool registry events, appended by the gateway on `o.evt.tool.<tool_id>`.

A tool's source code travels in these events: the sandbox has no database, so
the executor reads the code from the tools projection and sends it with each
`RunTool` command.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from o_contracts.base import Event
from o_contracts.pip_requirements import MAX_REQUIREMENTS, PipRequirement


class ToolCreated(Event):
    tool_id: str
    name: str
    description: str | None = None
    source_type: str = "python"
    source_code: str
    json_schema: dict[str, Any]
    tags: list[str] = Field(default_factory=list)
    return_char_limit: int = 50000
    default_requires_approval: bool = False
    # A tool that may safely run twice (a read, a pure function): if its
    # sandbox dies mid-call the call is retried once instead of failing.
    idempotent: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Packages its source imports, installed by the sandbox (`changes["pip_requirements"]`
    # in a ToolUpdated: the same list as dicts).
    pip_requirements: list[PipRequirement] = Field(
        default_factory=list, max_length=MAX_REQUIREMENTS
    )


class ToolUpdated(Event):
    """Only the fields present in `changes` changed (PATCH or PUT upsert)."""

    tool_id: str
    changes: dict[str, Any]


class ToolDeleted(Event):
    tool_id: str
