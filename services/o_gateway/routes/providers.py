"""`/v1/providers/`: model providers registered through the API (Letta's bring-your-own-key).

A provider is its own aggregate (`o.evt.provider.<id>`, events/providers.py), decided
here. Its models are whatever it lists when it is made and when it is refreshed (never
asked by `/v1/models`), and its handles are `<name>/<model>`: an agent given one is
served by the executor with the provider's key (o_runtime/provider_registry.py).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query

from o_contracts import subjects
from o_contracts.events import (
    ProviderCreated,
    ProviderDeleted,
    ProviderModelsSynced,
    ProviderUpdated,
)
from o_contracts.ids import new_id
from o_contracts.projection_names import PROVIDERS
from o_gateway import render
from o_gateway.commands import append_decided
from o_gateway.mcp_registry import check_url, encrypt_one
from o_gateway.pagination import Listing
from o_gateway.provider_models import ProviderRefused, ProviderUnreachable, ask
from o_gateway.provider_schemas import CheckProviderBody, CreateProviderBody, UpdateProviderBody
from o_gateway.routes.paths import route
from o_gateway.state import GW, Gateway, checked_id
from o_runtime import llm_providers
from o_runtime.llm_providers import ProviderConfig
from o_runtime.provider_registry import config_of
from o_runtime.provider_types import (
    UnsupportedProvider,
    base_url_for,
    is_embedding_model,
    provider_type,
)
from o_runtime.tool_secrets import REDACTED

router = APIRouter()
log = logging.getLogger(__name__)


def provider_json(row: Any) -> dict[str, Any]:
    """Letta's Provider: the key is never shown (redacted when there is one)."""
    return {
        "id": row["id"],
        "name": row["name"],
        "provider_type": row["provider_type"],
        "provider_category": "byok",
        "api_key": REDACTED if row["encrypted_api_key"] else None,
        "base_url": row["base_url"],
        "access_key": None,
        "region": row["region"],
        "api_version": row["api_version"],
        "organization_id": None,
        "updated_at": render.iso(row["updated_at"]),
        "last_synced": render.iso(row["last_synced"]),
    }


def _checked_type(name: str) -> None:
    try:
        provider_type(name)
    except UnsupportedProvider as exc:
        raise HTTPException(400, str(exc)) from exc


def _address(gw: Gateway, kind: str, base_url: str | None) -> str | None:
    """The base_url to record (None: the type's public one); 400 if the type needs one,
    422 for an address the gateway may not call."""
    try:
        base_url_for(kind, base_url)
    except UnsupportedProvider as exc:
        raise HTTPException(400, str(exc)) from exc
    if base_url is not None:
        check_url(base_url, gw.settings.providers_allow_private_urls, field="base_url")
    return base_url


def _connection(name: str, kind: str, base_url: str | None, api_key: str) -> ProviderConfig:
    """What a check or a sync calls: the provider as it would be registered."""
    config = config_of(
        {
            "name": name,
            "provider_type": kind,
            "base_url": base_url,
            "encrypted_api_key": None,
            "models": [],
            "embedding_models": [],
        }
    )
    assert config is not None  # (the type was checked)
    return dataclasses.replace(config, api_key=api_key or None)


async def _models(config: ProviderConfig, kind: str) -> list[str]:
    """What the provider lists, or the reason it would not (401, with its words) or could
    not (502)."""
    try:
        return await ask(config)
    except ProviderRefused as exc:
        raise HTTPException(401, f"Invalid api key for provider_type={kind}: {exc}") from exc
    except ProviderUnreachable as exc:
        raise HTTPException(
            502, f"provider_type={kind} at {config.base_url} did not answer: {exc}"
        ) from exc


async def _append(gw: Gateway, provider_id: str, event: Any, expected: int | None) -> int:
    subject = subjects.provider_subject(provider_id)
    return await append_decided(
        gw.eventlog, subject, provider_id, event, expected, f"provider {provider_id}"
    )


async def _row(gw: Gateway, provider_id: str) -> Any:
    row = await gw.pool.fetchrow(
        "SELECT * FROM providers WHERE id = $1", checked_id(provider_id, "provider")
    )
    if row is None:
        raise HTTPException(404, f"Provider not found with id='{provider_id}'")
    return row


def _synced(provider_id: str, models: list[str]) -> ProviderModelsSynced:
    return ProviderModelsSynced(
        provider_id=provider_id,
        models=[m for m in models if not is_embedding_model(m)],
        embedding_models=[m for m in models if is_embedding_model(m)],
    )


async def _name_free(gw: Gateway, name: str) -> None:
    if "/" in name:
        raise HTTPException(
            422, f"a provider's name may not hold '/' (handles are name/model): {name!r}"
        )
    if name in llm_providers.operators():
        raise HTTPException(
            400,
            f"Provider name '{name}' conflicts with an existing base provider."
            " Please choose a different name.",
        )
    if await gw.pool.fetchval("SELECT 1 FROM providers WHERE name = $1", name):
        raise HTTPException(409, f"a provider named '{name}' already exists")


@route(router, "GET", "/v1/providers/")
async def list_providers(
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    order: Literal["asc", "desc"] = "desc",
    order_by: Literal["created_at"] = "created_at",
    name: str | None = None,
    provider_type: str | None = None,
) -> list[dict[str, Any]]:
    """The providers registered through the API (Letta lists its BYOK ones here too)."""
    q = Listing("providers")
    if name is not None:
        q.filter("name = {}", name)
    if provider_type is not None:
        q.filter("provider_type = {}", provider_type)
    rows = await q.page(gw.pool, "provider", before, after, order, limit)
    return [provider_json(r) for r in rows]


@route(router, "POST", "/v1/providers/")
async def create_provider(body: CreateProviderBody, gw: GW) -> dict[str, Any]:
    """Register a provider, and record the models it lists now (as Letta syncs them). One
    that does not answer is registered all the same, without models: refresh it later."""
    _checked_type(body.provider_type)
    await _name_free(gw, body.name)
    base_url = _address(gw, body.provider_type, body.base_url)
    provider_id = new_id("provider")
    created = ProviderCreated(
        provider_id=provider_id,
        name=body.name,
        provider_type=body.provider_type,
        base_url=base_url,
        encrypted_api_key=encrypt_one(body.api_key or None),
        region=body.region,
        api_version=body.api_version,
    )
    seq = await _append(gw, provider_id, created, 0)
    config = _connection(body.name, body.provider_type, base_url, body.api_key)
    try:
        models = await ask(config)
    except (ProviderRefused, ProviderUnreachable) as exc:
        log.warning("provider %s (%s) listed no models: %s", body.name, provider_id, exc)
    else:
        seq = await _append(gw, provider_id, _synced(provider_id, models), seq)
    await gw.visible(seq, PROVIDERS)
    return provider_json(await _row(gw, provider_id))


@route(router, "POST", "/v1/providers/check")
async def check_provider(body: CheckProviderBody, gw: GW) -> dict[str, str]:
    """Whether the provider takes the key: it is asked for its models with it."""
    _checked_type(body.provider_type)
    if not body.api_key:
        raise HTTPException(400, "API key is required!")
    base_url = _address(gw, body.provider_type, body.base_url)
    await _models(
        _connection("check", body.provider_type, base_url, body.api_key), body.provider_type
    )
    return {"message": f"Valid api key for provider_type={body.provider_type}"}


@route(router, "GET", "/v1/providers/{provider_id}")
async def retrieve_provider(provider_id: str, gw: GW) -> dict[str, Any]:
    return provider_json(await _row(gw, provider_id))


@route(router, "PATCH", "/v1/providers/{provider_id}")
async def modify_provider(provider_id: str, body: UpdateProviderBody, gw: GW) -> dict[str, Any]:
    """A new key (Letta's update requires one), and the address, region or API version
    given; the executor uses them from its next model call."""
    row = await _row(gw, provider_id)
    changes: dict[str, Any] = {"encrypted_api_key": encrypt_one(body.api_key or None)}
    if body.base_url is not None:
        changes["base_url"] = _address(gw, row["provider_type"], body.base_url)
    if body.region is not None:
        changes["region"] = body.region
    if body.api_version is not None:
        changes["api_version"] = body.api_version
    event = ProviderUpdated(provider_id=row["id"], changes=changes)
    await gw.visible(await _append(gw, row["id"], event, row["last_seq"]), PROVIDERS)
    return provider_json(await _row(gw, provider_id))


@route(router, "DELETE", "/v1/providers/{provider_id}")
async def delete_provider(provider_id: str, gw: GW) -> dict[str, str]:
    """Agents using its handles fail their next model call, saying it is not configured."""
    row = await _row(gw, provider_id)
    event = ProviderDeleted(provider_id=row["id"])
    await gw.visible(await _append(gw, row["id"], event, row["last_seq"]), PROVIDERS)
    return {"message": f"Provider id={row['id']} successfully deleted"}


@route(router, "POST", "/v1/providers/{provider_id}/check")
async def check_existing_provider(provider_id: str, gw: GW) -> dict[str, str]:
    row = await _row(gw, provider_id)
    config = config_of(row)
    if config is None:
        raise HTTPException(400, f"provider_type '{row['provider_type']}' is not supported by O")
    await _models(config, row["provider_type"])
    return {"message": f"Valid api key for provider_type={row['provider_type']}"}


@route(router, "PATCH", "/v1/providers/{provider_id}/refresh")
async def refresh_provider_models(provider_id: str, gw: GW) -> dict[str, Any]:
    """Ask the provider for its models again and record them (new ones added, gone ones
    removed)."""
    row = await _row(gw, provider_id)
    config = config_of(row)
    if config is None:
        raise HTTPException(400, f"provider_type '{row['provider_type']}' is not supported by O")
    models = await _models(config, row["provider_type"])
    event = _synced(row["id"], models)
    await gw.visible(await _append(gw, row["id"], event, row["last_seq"]), PROVIDERS)
    return provider_json(await _row(gw, provider_id))
