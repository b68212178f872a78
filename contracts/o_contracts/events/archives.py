"""Archives: named collections of archival passages that agents share (Letta's archives).

An archive is its own aggregate on `o.evt.archive.<archive_id>`, decided by the memory
service (it embeds passages, and keeps archival memory): its name, and every passage put
in it, through its API or by an agent. An agent's archival memory is its own passages
(`o.evt.archival.<agent_id>`) and those of the archives attached to it; what an agent
writes while an archive is attached goes into the first one attached, where every agent
sharing it finds it.

Attaching and detaching are on `o.evt.archive.<archive_id>.agent.<agent_id>`, so that an
agent's archives as of any log position are one filtered read
(`o.evt.archive.*.agent.<agent_id>`: a shadow replay's snapshot folds them).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from o_contracts.base import Event
from o_contracts.events.archival import ArchivalPassage


class ArchiveCreated(Event):
    archive_id: str
    name: str
    description: str | None = None
    # The embedder its passages' vectors come from (e.g. "local/all-MiniLM-L6-v2").
    embedding_model: str


class ArchiveUpdated(Event):
    """Only the fields present in `changes` changed (`name`, `description`)."""

    archive_id: str
    changes: dict[str, Any]


class ArchiveDeleted(Event):
    """The archive and every passage in it are gone; agents it was attached to keep their own."""

    archive_id: str


class ArchiveAttached(Event):
    archive_id: str
    agent_id: str


class ArchiveDetached(Event):
    archive_id: str
    agent_id: str


class ArchivePassagesInserted(Event):
    """Passages put in the archive: one request of its API (all or none), or one memory an
    agent attached to it wrote (`agent_id`)."""

    archive_id: str
    passages: list[ArchivalPassage] = Field(min_length=1)
    agent_id: str | None = None


class ArchivePassageDeleted(Event):
    archive_id: str
    passage_id: str
