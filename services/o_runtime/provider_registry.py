"""Model providers registered through the API (Letta's bring-your-own-key), as this
process sees them: read from the gateway's "providers" projection into
llm_providers' view, where `provider(name)` finds them after the operator's own.

A process reads them when it needs one: the gateway before it resolves a handle to a
provider that is not the operator's, or lists models; the executor before each model call
to such a provider. That is one small read (never for the operator's providers, so the
usual run does none), and a new provider, a rotated key or a deleted provider counts at
once, in every replica. The key is decrypted here, in memory (events/providers.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

from o_runtime import llm_providers, tool_secrets
from o_runtime.llm_providers import ProviderConfig
from o_runtime.provider_types import TYPES, is_embedding_model

_SELECT = (
    "SELECT id, name, provider_type, base_url, encrypted_api_key, models, embedding_models"
    " FROM providers"
)

# The pool a process reads them with (bind(); None: it has no registered providers).
_pool: asyncpg.Pool | None = None


def bind(pool: asyncpg.Pool) -> None:
    """Let this process read registered providers (the executor and the gateway do)."""
    global _pool
    _pool = pool


def decrypted_key(ciphertext: str | None) -> str | None:
    """The key, or None where it does not decrypt (the provider then refuses the call
    with its own 401, which names the provider)."""
    if not ciphertext:
        return None
    try:
        return tool_secrets.decrypt_all({"api_key": ciphertext})["api_key"]
    except tool_secrets.SecretsUnavailable:
        return None


def config_of(row: Mapping[str, Any]) -> ProviderConfig | None:
    kind = TYPES.get(row["provider_type"])
    if kind is None:
        return None
    models = list(row["models"] or ())
    return ProviderConfig(
        name=row["name"],
        protocol=kind.protocol,
        base_url=row["base_url"] or kind.default_base_url,
        api_key=decrypted_key(row["encrypted_api_key"]),
        models=tuple(m for m in models if not is_embedding_model(m)),
        embedding_models=tuple(row["embedding_models"] or ()),
        endpoint_type=kind.endpoint_type,
        category="byok",
        provider_type=row["provider_type"],
    )


async def load_all(pool: asyncpg.Pool | None = None) -> None:
    """Read every registered provider (the models list; an agent file's import)."""
    db = pool or _pool
    if db is None:
        return
    found = {}
    for row in await db.fetch(_SELECT):
        config = config_of(row)
        if config is not None:
            found[row["name"]] = config
    llm_providers.replace_registered(found)


async def ensure(name: str, pool: asyncpg.Pool | None = None) -> None:
    """Read the registered provider `name`, unless it is the operator's (no read)."""
    db = pool or _pool
    if db is None or name in llm_providers.operators():
        return
    row = await db.fetchrow(f"{_SELECT} WHERE name = $1 ORDER BY created_at LIMIT 1", name)
    llm_providers.set_registered(name, config_of(row) if row is not None else None)


async def ensure_handle(handle: str, pool: asyncpg.Pool | None = None) -> None:
    """ensure() for a handle's provider (`provider/model`)."""
    provider, sep, _ = handle.partition("/")
    if sep and provider:
        await ensure(provider, pool)
