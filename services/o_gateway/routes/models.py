"""GET /v1/models/ and /v1/models/embedding: the handles of every configured provider.

Each of the operator's providers is asked for its models (provider_models.py),
briefly cached; one that does not answer lists the models named in its
configuration instead, so a slow provider never breaks the listing. A provider
registered through the API lists what it listed when made or last refreshed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from o_gateway.models_config import embedding_config_for, llm_config_for
from o_gateway.provider_models import ProviderRefused, ProviderUnreachable, ask
from o_gateway.routes.paths import route
from o_gateway.state import GW, Gateway
from o_runtime import llm_providers, provider_registry
from o_runtime.llm_providers import ProviderConfig
from o_runtime.provider_types import is_embedding_model

router = APIRouter()
log = logging.getLogger(__name__)

CACHE_SECONDS = 60.0
_cache: dict[str, tuple[float, list[str]]] = {}


def _is_embedding(model: str) -> bool:
    return is_embedding_model(model)


async def models_of(config: ProviderConfig) -> list[str]:
    cached = _cache.get(config.name)
    if cached and time.monotonic() - cached[0] < CACHE_SECONDS:
        return cached[1]
    try:
        names = await ask(config)
    except (ProviderRefused, ProviderUnreachable) as exc:  # fall back to the configured list
        log.warning("provider %s did not list its models: %r", config.name, exc)
        names = [*config.models, *config.embedding_models]
    else:
        names = sorted({*names, *config.models, *config.embedding_models})
    _cache[config.name] = (time.monotonic(), names)
    return names


async def _all(gw: Gateway) -> list[tuple[str, str]]:
    """Every provider's models: the operator's as they answer now, registered ones as they
    listed them when made or last refreshed (routes/providers.py)."""
    await provider_registry.load_all(gw.pool)
    providers = list(llm_providers.configured().values())
    listed = await asyncio.gather(
        *(models_of(p) if p.category == "base" else _synced(p) for p in providers)
    )
    return [(p.name, m) for p, names in zip(providers, listed, strict=True) for m in names]


async def _synced(config: ProviderConfig) -> list[str]:
    # (Its embedding models too, where it speaks OpenAI's protocol: the memory service
    # embeds with them, o_memory/embeddings.py.)
    embedding = config.embedding_models if config.protocol == "openai" else ()
    return [*config.models, *embedding]


def model_json(llm_config: dict[str, Any]) -> dict[str, Any]:
    """Letta's Model: an llm_config (its deprecated fields) with the names Letta's list
    gives it (its provider_type is the endpoint's type)."""
    return {
        "handle": llm_config["handle"],
        "name": llm_config["model"],
        "display_name": llm_config["model"],
        "provider_type": llm_config["model_endpoint_type"],
        "provider_name": llm_config["provider_name"],
        "model_type": "llm",
        "max_context_window": llm_config["context_window"],
        **llm_config,
    }


def embedding_model_json(config: dict[str, Any]) -> dict[str, Any]:
    """Letta's EmbeddingModel, likewise."""
    return {
        "name": config["embedding_model"],
        "display_name": config["embedding_model"],
        "provider_type": config["embedding_endpoint_type"],
        "provider_name": config["embedding_endpoint_type"],
        "model_type": "embedding",
        **config,
    }


@route(router, "GET", "/v1/models/")
async def list_models(
    gw: GW,
    provider_category: Annotated[list[Literal["base", "byok"]] | None, Query()] = None,
    provider_name: str | None = None,
    provider_type: str | None = None,
) -> list[dict[str, Any]]:
    """Every provider's chat models; `provider_category`, `provider_name` and
    `provider_type` (the provider's type: a registered provider's, else its endpoint's)
    narrow the list, as Letta's do."""
    models = []
    for p, m in await _all(gw):
        if _is_embedding(m) or (provider_name is not None and p != provider_name):
            continue
        config = llm_providers.configured().get(p)
        if config is None:
            continue
        if provider_category and config.category not in provider_category:
            continue
        if provider_type is not None and provider_type != _type_of(config):
            continue
        models.append(model_json(llm_config_for(f"{p}/{m}")))
    return models


def _type_of(config: ProviderConfig) -> str:
    return config.provider_type or config.endpoint_type


@route(router, "GET", "/v1/models/embedding")
async def list_embedding_models(gw: GW) -> list[dict[str, Any]]:
    return [
        embedding_model_json(embedding_config_for(f"{p}/{m}"))
        for p, m in await _all(gw)
        if _is_embedding(m)
    ]
