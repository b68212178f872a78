"""GET /v1/models/ and /v1/models/embedding: the handles of every configured provider.

Each provider is asked for its models (its own /models endpoint, through its
SDK), briefly cached; one that does not answer lists the models named in its
configuration instead, so a slow provider never breaks the listing. The SDKs are
imported by the first listing that asks a provider of theirs, not with the gateway
(the anthropic one alone is ~38 MB of a process: docs/memory.md#footprint).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from fastapi import APIRouter

from o_gateway.models_config import embedding_config_for, llm_config_for
from o_gateway.routes.paths import route
from o_runtime import llm_providers
from o_runtime.llm_providers import ProviderConfig
from o_runtime.sdk_imports import imported

router = APIRouter()
log = logging.getLogger(__name__)

CACHE_SECONDS = 60.0
ASK_TIMEOUT = 3.0
_cache: dict[str, tuple[float, list[str]]] = {}


def _is_embedding(model: str) -> bool:
    return "embed" in model


async def _ask(config: ProviderConfig) -> list[str]:
    key = config.api_key or "not-set"
    await imported(config.protocol)
    if config.protocol == "anthropic":
        from anthropic import AsyncAnthropic

        anthropic = AsyncAnthropic(
            api_key=key, base_url=config.base_url, timeout=ASK_TIMEOUT, max_retries=0
        )
        return [m.id async for m in anthropic.models.list()]
    from openai import AsyncOpenAI

    openai = AsyncOpenAI(api_key=key, base_url=config.base_url, timeout=ASK_TIMEOUT, max_retries=0)
    return [m.id async for m in openai.models.list()]


async def models_of(config: ProviderConfig) -> list[str]:
    cached = _cache.get(config.name)
    if cached and time.monotonic() - cached[0] < CACHE_SECONDS:
        return cached[1]
    try:
        names = await asyncio.wait_for(_ask(config), ASK_TIMEOUT)
    except Exception as exc:  # any failure: fall back to the configured list
        log.warning("provider %s did not list its models: %r", config.name, exc)
        names = [*config.models, *config.embedding_models]
    else:
        names = sorted({*names, *config.models, *config.embedding_models})
    _cache[config.name] = (time.monotonic(), names)
    return names


async def _all() -> list[tuple[str, str]]:
    providers = list(llm_providers.configured().values())
    listed = await asyncio.gather(*(models_of(p) for p in providers))
    return [(p.name, m) for p, names in zip(providers, listed, strict=True) for m in names]


@route(router, "GET", "/v1/models/")
async def list_models() -> list[dict[str, Any]]:
    return [llm_config_for(f"{p}/{m}") for p, m in await _all() if not _is_embedding(m)]


@route(router, "GET", "/v1/models/embedding")
async def list_embedding_models() -> list[dict[str, Any]]:
    return [embedding_config_for(f"{p}/{m}") for p, m in await _all() if _is_embedding(m)]
