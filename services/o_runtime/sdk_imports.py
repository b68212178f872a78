"""The LLM providers' SDKs (`openai`, `anthropic`), imported when a process first needs one.

Importing an SDK is most of what it costs a process: the anthropic SDK alone holds ~38 MB
of memory once imported (~2,900 modules), the openai one ~14 MB (plus httpx), where issue
16 asks for every service under 150 MB (docs/memory.md#footprint). So no module imports
them at its top: the gateway imports one only to list a provider's models, the evolution
service for its proposals and judgements, each on first use; the executor at start, for
the protocols of the configured providers, and the memory service `openai` for OpenAI
embeddings alone (at start if an agent or folder has them; its judgements are asked of the
executor): a run's first call never waits for an import, and an unused SDK is never loaded.

A first import takes 0.2-1 s of CPU; `imported` does it in a worker thread so a running
event loop keeps serving meanwhile (the GIL is handed over every few ms).
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterable

from o_runtime.llm_providers import Protocol


def import_sdks(protocols: Iterable[Protocol]) -> list[str]:
    """Import the SDK of each protocol now; the SDK modules, in order."""
    names: list[str] = sorted(set(protocols))
    for name in names:
        importlib.import_module(name)
    return names


async def imported(*protocols: Protocol) -> None:
    """Import the protocols' SDKs not imported yet, off the event loop."""
    missing = [p for p in protocols if p not in sys.modules]
    if missing:
        await asyncio.to_thread(import_sdks, missing)


def api_error(protocol: Protocol) -> type[Exception]:
    """The base class of the errors the protocol's SDK raises (its `APIError`)."""
    if protocol == "anthropic":
        import anthropic

        return anthropic.APIError
    import openai

    return openai.APIError
