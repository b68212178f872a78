"""Model handles (`provider/model`) to Letta's llm_config and embedding_config shapes."""

from __future__ import annotations

import os
import re
from typing import Any

from fastapi import HTTPException

from o_runtime import llm_providers
from o_runtime.llm_providers import context_window

_EMBEDDING_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def _split(handle: str, what: str) -> tuple[str, str]:
    provider, sep, model = handle.partition("/")
    if not sep or not provider or not model:
        raise HTTPException(400, f"{what} handle '{handle}' must be of the form provider/model")
    return provider, model


def default_max_tokens(endpoint_type: str, model: str) -> int | None:
    """Letta's OpenAI provider gives every model a max output: 16384 (128000 for gpt-5.2
    and later, but their -chat variants); other providers leave it to the model."""
    if endpoint_type != "openai":
        return None
    return 128000 if re.match(r"^gpt-5\.[234]", model) and "-chat" not in model else 16384


def llm_config_for(handle: str, context_window_limit: int | None = None) -> dict[str, Any]:
    provider_name, model = _split(handle, "model")
    try:
        config = llm_providers.provider(provider_name)
    except llm_providers.ProviderNotConfigured as exc:
        raise HTTPException(400, str(exc)) from exc
    window = context_window(model, config)
    if context_window_limit:
        window = min(window, context_window_limit) if window else context_window_limit
    return {
        "model": model,
        "display_name": None,
        "model_endpoint_type": config.endpoint_type,
        "model_endpoint": config.base_url,
        "provider_name": provider_name,
        "provider_category": config.category,
        "model_wrapper": None,
        "context_window": window,
        "put_inner_thoughts_in_kwargs": False,
        "handle": handle,
        "temperature": 1.0,
        "max_tokens": default_max_tokens(config.endpoint_type, model),
        "enable_reasoner": False,
        "reasoning_effort": None,
        "max_reasoning_tokens": 0,
        "frequency_penalty": None,
        # OpenAI's own default (and what Letta shows an OpenAI agent's model_settings with).
        "parallel_tool_calls": config.endpoint_type == "openai",
        "response_format": None,
        "strict": False,
    }


def override_handle(handle: str) -> str:
    """A request's override_model, checked: a configured provider's `provider/model`
    (else 404, as Letta answers a handle it does not know)."""
    provider_name, sep, model = handle.partition("/")
    try:
        if not sep or not model:
            raise llm_providers.ProviderNotConfigured(handle)
        llm_providers.provider(provider_name)
    except llm_providers.ProviderNotConfigured as exc:
        raise HTTPException(404, f"Handle {handle} not found or not accessible") from exc
    return handle


def llm_config_from_body(config: dict[str, Any]) -> dict[str, Any]:
    """An explicit llm_config: validated enough that the executor can use it."""
    model = config.get("model")
    endpoint = config.get("model_endpoint_type")
    if not isinstance(model, str) or not model or not isinstance(endpoint, str):
        raise HTTPException(422, "llm_config needs 'model' and 'model_endpoint_type'")
    handle = config.get("handle") or f"{endpoint}/{model}"
    return (
        llm_config_for(handle, config.get("context_window"))
        | {k: v for k, v in config.items() if k not in ("handle",)}
        | {"handle": handle}
    )


def _embedding_endpoint(provider_name: str) -> str | None:
    config = llm_providers.configured().get(provider_name)
    if config is not None:
        return config.base_url
    return os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"


# O embeds locally when a folder or an archive names no embedder (Letta requires one, or its
# default_embedding_handle): a sentence-transformers model, run on the CPU.
LOCAL_EMBEDDING = {
    "embedding_endpoint_type": "hugging-face",
    "embedding_endpoint": None,
    "embedding_model": "all-MiniLM-L6-v2",
    "embedding_dim": 384,
    "embedding_chunk_size": 300,
    "handle": "local/all-MiniLM-L6-v2",
    "batch_size": 32,
    "azure_endpoint": None,
    "azure_version": None,
    "azure_deployment": None,
}


def embedding_config_for(handle: str) -> dict[str, Any]:
    provider, model = _split(handle, "embedding")
    return {
        "embedding_endpoint_type": provider,
        "embedding_endpoint": _embedding_endpoint(provider),
        "embedding_model": model,
        "embedding_dim": _EMBEDDING_DIMS.get(model, 1536),
        "embedding_chunk_size": 300,
        "handle": handle,
        "batch_size": 1024,
        "azure_endpoint": None,
        "azure_version": None,
        "azure_deployment": None,
    }
