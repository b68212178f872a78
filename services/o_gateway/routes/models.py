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
from typing import Any

from fastapi import APIRouter

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
    # (Its chat models only: O embeds with the operator's embedding providers.)
    return list(config.models)


@route(router, "GET", "/v1/models/")
async def list_models(gw: GW) -> list[dict[str, Any]]:
    return [llm_config_for(f"{p}/{m}") for p, m in await _all(gw) if not _is_embedding(m)]


@route(router, "GET", "/v1/models/embedding")
async def list_embedding_models(gw: GW) -> list[dict[str, Any]]:
    return [embedding_config_for(f"{p}/{m}") for p, m in await _all(gw) if _is_embedding(m)]
