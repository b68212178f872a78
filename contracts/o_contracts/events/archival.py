"""Archival memory events, appended by the memory service on `o.evt.archival.<agent_id>`.

Everything costly or non-deterministic about a passage (its embedding, the
importance the LLM gave it, its timestamps) is decided before the append and
carried in the event, so replaying the log rebuilds exactly the same rows
without calling a model again. Re-embedding on rebuild instead would make a
rebuild depend on a provider being up, on the model version and even on
batching (the local model gives a text batched with others a vector a few
ulps off the one it gives it alone), so rebuilt rows would not equal the
originals and the log would no longer be the truth. The price is ~2 KB per
passage event at 384 dimensions (8 KB at 1536).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from o_contracts.base import Event
from o_contracts.models import Value

ImportanceSource = Literal["caller", "llm", "default"]


class ArchivalPassage(Value):
    passage_id: str
    text: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    created_at: datetime
    importance: int = Field(ge=1, le=10)
    # "caller" (given through the API or a tool), "llm" (rated by the agent's
    # model), "default" (the model could not rate it).
    importance_source: ImportanceSource = "default"
    # The embedder that produced `embedding`, e.g. "local/all-MiniLM-L6-v2":
    # only vectors of the same model are compared.
    embedding_model: str
    # float32 little-endian, base64 (o_contracts.vectors).
    embedding: str
    kind: Literal["memory", "reflection"] = "memory"
    # A reflection cites the passages it was drawn from.
    sources: list[str] = Field(default_factory=list)
    # The client's own (an archive's passages: Letta's `metadata`).
    metadata: dict[str, Any] = Field(default_factory=dict)


class PassageInserted(Event):
    agent_id: str
    passage: ArchivalPassage


class PassageDeleted(Event):
    agent_id: str
    passage_id: str


class PassagesAccessed(Event):
    """One search's results, batched: one event per search, not one per passage."""

    agent_id: str
    passage_ids: list[str]
    accessed_at: datetime


class MemoriesReflected(Event):
    """The agent's LLM drew insights from recent memories; they become passages.

    Also resets the agent's importance-since-last-reflection counter, even when
    the model found nothing worth keeping.
    """

    agent_id: str
    insights: list[ArchivalPassage]
    source_ids: list[str]
