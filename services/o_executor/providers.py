"""LLM providers by handle (`provider/model`) through the official SDKs.

`anthropic/...` (and user-named providers of type anthropic) use the
`anthropic` SDK; everything else speaks the OpenAI protocol through the
`openai` SDK with the provider's base URL and key (o_runtime.llm_providers).
The SDKs' own retries are off: llm.py retries with backoff, the same way for
every provider.

Each SDK is imported when a provider of its protocol is first used, not with this module
(o_runtime/sdk_imports.py: the anthropic SDK alone is ~38 MB of a process); the executor
imports the configured providers' SDKs at start.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from o_runtime.llm_providers import ProviderConfig, ProviderNotConfigured, provider

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from openai import AsyncOpenAI


class UnknownProvider(ValueError):
    pass


@dataclass(frozen=True)
class Handle:
    provider: str
    model: str

    @classmethod
    def parse(cls, handle: str) -> Handle:
        provider, sep, model = handle.partition("/")
        if not sep or not provider or not model:
            raise UnknownProvider(f"model handle '{handle}' is not of the form provider/model")
        return cls(provider, model)

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"


TIMEOUT = 120.0


def config_for(handle: Handle) -> ProviderConfig:
    try:
        return provider(handle.provider)
    except ProviderNotConfigured as exc:
        raise UnknownProvider(str(exc)) from exc


def openai_client(name: str) -> AsyncOpenAI:
    return _openai_for(provider(name))


def anthropic_client(name: str) -> AsyncAnthropic:
    return _anthropic_for(provider(name))


# One client per provider as configured: a registered provider whose key or address
# changed gets a new one (provider_registry.py).
@cache
def _openai_for(config: ProviderConfig) -> AsyncOpenAI:
    from openai import AsyncOpenAI

    return AsyncOpenAI(
        api_key=config.api_key or "not-set",
        base_url=config.base_url,
        max_retries=0,
        timeout=TIMEOUT,
    )


@cache
def _anthropic_for(config: ProviderConfig) -> AsyncAnthropic:
    from anthropic import AsyncAnthropic

    return AsyncAnthropic(
        api_key=config.api_key or "not-set",
        base_url=config.base_url,
        max_retries=0,
        timeout=TIMEOUT,
    )
