"""Asking a provider for its models (its own /models endpoint, through its SDK): how the
models list finds what a provider offers, and how a registered provider's key is checked.

The SDKs are imported by the first request that asks a provider of theirs, not with the
gateway (the anthropic one alone is ~38 MB of a process: docs/memory.md#footprint).
"""

from __future__ import annotations

import asyncio

from o_runtime.llm_providers import ProviderConfig
from o_runtime.sdk_imports import imported

ASK_TIMEOUT = 3.0


class ProviderRefused(Exception):
    """The provider answered the key with 401 or 403."""


class ProviderUnreachable(Exception):
    """The provider did not answer, or answered with another error."""


async def ask(config: ProviderConfig, timeout: float = ASK_TIMEOUT) -> list[str]:
    """The provider's model ids. Raises ProviderRefused or ProviderUnreachable, each with
    the provider's own words."""
    try:
        return await asyncio.wait_for(_ask(config, timeout), timeout)
    except Exception as exc:
        status = getattr(exc, "status_code", None)
        if status in (401, 403):
            raise ProviderRefused(f"{status}: {_message(exc)}") from exc
        raise ProviderUnreachable(_message(exc) or type(exc).__name__) from exc


def _message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return str(exc)


async def _ask(config: ProviderConfig, timeout: float) -> list[str]:
    key = config.api_key or "not-set"
    await imported(config.protocol)
    if config.protocol == "anthropic":
        from anthropic import AsyncAnthropic

        anthropic = AsyncAnthropic(
            api_key=key, base_url=config.base_url, timeout=timeout, max_retries=0
        )
        return [m.id async for m in anthropic.models.list()]
    from openai import AsyncOpenAI

    openai = AsyncOpenAI(api_key=key, base_url=config.base_url, timeout=timeout, max_retries=0)
    return [m.id async for m in openai.models.list()]
