"""LLM providers by handle (`provider/model`) through the official SDKs.

`openai/<model>` uses the `openai` SDK with OPENAI_API_KEY and OPENAI_BASE_URL
from the environment, so any OpenAI-compatible server works.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

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


SUPPORTED_PROVIDERS = ("openai",)


@cache
def openai_client() -> AsyncOpenAI:
    # Retries are ours to decide (issue: backoff policy per run), so the SDK's
    # own are kept small; timeouts generous for slow local models.
    return AsyncOpenAI(
        api_key=os.environ.get("OPENAI_API_KEY") or "not-set",
        base_url=os.environ.get("OPENAI_BASE_URL") or None,
        max_retries=2,
        timeout=120.0,
    )


def client_for(handle: Handle) -> AsyncOpenAI:
    if handle.provider == "openai":
        return openai_client()
    raise UnknownProvider(
        f"provider '{handle.provider}' is not configured (known: {', '.join(SUPPORTED_PROVIDERS)})"
    )
