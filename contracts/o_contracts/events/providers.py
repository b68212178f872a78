"""Model providers registered through the API (Letta's bring-your-own-key providers).

A provider is its own aggregate (`o.evt.provider.<provider_id>`), decided by the
gateway. Its API key enters the log only as ciphertext (Fernet under `O_SECRETS_KEY`,
o_runtime/tool_secrets.py); the gateway, to ask the provider for its models, and the
executor, to call it, decrypt it in memory. Its models are recorded as they were
listed when it was made or refreshed (`ProviderModelsSynced`), so `/v1/models` never
waits on a provider.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from o_contracts.base import Event


class ProviderCreated(Event):
    provider_id: str
    name: str
    # Letta's ProviderType name (o_runtime/provider_types.py: the ones O can call).
    provider_type: str
    base_url: str | None = None
    encrypted_api_key: str | None = None
    region: str | None = None
    api_version: str | None = None


class ProviderUpdated(Event):
    """Only the fields present in `changes` changed (ProviderCreated's field names)."""

    provider_id: str
    changes: dict[str, Any]


class ProviderModelsSynced(Event):
    """What the provider listed when asked (chat models and embedding models apart)."""

    provider_id: str
    models: list[str] = Field(default_factory=list)
    embedding_models: list[str] = Field(default_factory=list)


class ProviderDeleted(Event):
    provider_id: str
