"""`/v1/sandbox-config/`: Letta's sandbox configurations and their environment variables.

One configuration per type (Letta's unique type per organization): its id is derived from
the type, so two clients making the local configuration at once make one (the second append
finds the first). Each configuration is an aggregate of the gateway's
(`o.evt.sandbox_config.<id>`, events/sandbox_configs.py), its variables part of it, every
change decided on its row as read (a change meanwhile is a 409, never a lost update).

O's sandbox uses the local configuration: its variables reach every tool run beneath the
agent's own secrets, its `pip_requirements` are installed for every tool
(o_runtime/sandbox_settings.py, docs/sandbox.md). Values are encrypted before they are
appended (`O_SECRETS_KEY`); the API shows them, as Letta's does, to its key's holder.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, HTTPException, Query, Response

from o_contracts import subjects
from o_contracts.events import (
    SandboxConfigCreated,
    SandboxConfigDeleted,
    SandboxConfigUpdated,
    SandboxEnvVarDeleted,
    SandboxEnvVarSet,
)
from o_contracts.events.sandbox_configs import SandboxType
from o_contracts.ids import derived_id
from o_contracts.projection_names import SANDBOX_CONFIGS
from o_gateway import render
from o_gateway.commands import append_visible
from o_gateway.package_hints import prepare_packages
from o_gateway.routes.paths import route
from o_gateway.sandbox_config_schemas import (
    SHAPES,
    AnyConfig,
    E2BSandboxConfig,
    EnvVarBody,
    EnvVarUpdateBody,
    LocalSandboxConfig,
    SandboxConfigBody,
    checked,
    stored,
    type_of,
)
from o_gateway.state import GW, Gateway, checked_id
from o_gateway.tool_runs import encrypted
from o_runtime.tool_secrets import SecretsUnavailable, decrypt_all

router = APIRouter()
PREFIX = "/v1/sandbox-config"


def config_id_of(sandbox_type: SandboxType) -> str:
    """The type's configuration's id: the same for every request (one per type), shaped as
    Letta's (`sandbox-<uuid4>`: its published pattern wants version 4)."""
    derived = uuid.UUID(
        derived_id("sandbox", "sandbox-config", sandbox_type).removeprefix("sandbox-")
    )
    return f"sandbox-{uuid.UUID(bytes=derived.bytes, version=4)}"


def _opening(row: asyncpg.Record) -> dict[str, Any]:
    """The fields a configuration and a variable open with, in Letta's order (O has one user,
    so no creator is named)."""
    return {
        "created_by_id": None,
        "last_updated_by_id": None,
        "created_at": render.iso(row["created_at"]),
        "updated_at": render.iso(row["updated_at"]),
        "id": row["id"],
    }


def config_json(row: asyncpg.Record) -> dict[str, Any]:
    return {
        **_opening(row),
        "type": row["sandbox_type"],
        "organization_id": render.ORGANIZATION_ID,
        # (In its shape's field order, as Letta shows it: Postgres keeps no key order.)
        "config": stored(SHAPES[row["sandbox_type"]].model_validate(row["config"])),
    }


def _plain(row: asyncpg.Record) -> str | None:
    try:
        return decrypt_all({"v": row["encrypted_value"]})["v"]
    except SecretsUnavailable:
        return None  # (the key it was set under is gone: docs/security.md, rotation)


def env_var_json(row: asyncpg.Record) -> dict[str, Any]:
    return {
        **_opening(row),
        "key": row["key"],
        "value": _plain(row),
        "description": row["description"],
        "organization_id": render.ORGANIZATION_ID,
        # (Letta's stored form; O keeps values encrypted and shows no ciphertext.)
        "value_enc": None,
        "sandbox_config_id": row["sandbox_config_id"],
    }


async def _config_row(gw: Gateway, config_id: str) -> asyncpg.Record:
    row = await gw.pool.fetchrow("SELECT * FROM sandbox_configs WHERE id = $1", config_id)
    if row is None:
        raise HTTPException(404, f"SandboxConfig not found with id='{config_id}'")
    return row


async def _append(gw: Gateway, config_id: str, event: Any, expected: int) -> None:
    subject = subjects.sandbox_config_subject(config_id)
    what = f"sandbox configuration {config_id}"
    await append_visible(gw, subject, config_id, event, expected, what, SANDBOX_CONFIGS)


async def _put(gw: Gateway, config: AnyConfig, replace: bool) -> dict[str, Any]:
    """The type's configuration made with `config`, or (`replace`) replaced by it whole, as
    Letta's create does; an existing one otherwise left as it is (the `/default` routes)."""
    sandbox_type = type_of(config)
    config_id = config_id_of(sandbox_type)
    row = await gw.pool.fetchrow("SELECT * FROM sandbox_configs WHERE id = $1", config_id)
    settings = stored(config)
    if row is None:
        # (Made before and deleted, its subject has history: the new one follows it.)
        last = await gw.eventlog.last_seq(subjects.sandbox_config_subject(config_id))
        created = SandboxConfigCreated(
            sandbox_config_id=config_id, sandbox_type=sandbox_type, config=settings
        )
        await _append(gw, config_id, created, last)
    elif replace and row["config"] != settings:
        updated = SandboxConfigUpdated(sandbox_config_id=config_id, config=settings)
        await _append(gw, config_id, updated, row["last_seq"])
    await _prepared(gw, sandbox_type, settings)
    return config_json(await _config_row(gw, config_id))


async def _prepared(gw: Gateway, sandbox_type: SandboxType, settings: dict[str, Any]) -> None:
    """The local configuration's packages installed ahead (those of tools without their own:
    a tool's own set is prepared when the tool is registered)."""
    if sandbox_type == "local" and settings.get("pip_requirements"):
        await prepare_packages(gw, [])


@route(router, "POST", f"{PREFIX}/")
async def create_sandbox_config(body: SandboxConfigBody, gw: GW) -> dict[str, Any]:
    return await _put(gw, checked(body.config), replace=True)


@route(router, "POST", f"{PREFIX}/e2b/default")
async def default_e2b_sandbox_config(gw: GW) -> dict[str, Any]:
    return await _put(gw, E2BSandboxConfig.model_validate({}), replace=False)


@route(router, "POST", f"{PREFIX}/local/default")
async def default_local_sandbox_config(gw: GW) -> dict[str, Any]:
    return await _put(gw, LocalSandboxConfig.model_validate({}), replace=False)


@route(router, "POST", f"{PREFIX}/local")
async def create_local_sandbox_config(body: LocalSandboxConfig, gw: GW) -> dict[str, Any]:
    return await _put(gw, checked(body), replace=True)


@route(router, "POST", f"{PREFIX}/local/recreate-venv")
async def recreate_local_venv(gw: GW) -> dict[str, Any]:
    """Letta rebuilds its local virtualenv here. O keeps none: each set of packages is
    installed on its own, whole or not at all (docs/sandbox.md), so there is nothing to
    rebuild; the local configuration is answered, made if there is none, as Letta's is."""
    return await _put(gw, LocalSandboxConfig.model_validate({}), replace=False)


@route(router, "PATCH", f"{PREFIX}/{{sandbox_config_id}}")
async def update_sandbox_config(
    sandbox_config_id: str, body: SandboxConfigBody, gw: GW
) -> dict[str, Any]:
    """The settings sent change; the others stay (Letta's drops those not sent)."""
    row = await _config_row(gw, checked_id(sandbox_config_id, "sandbox"))
    sent_type = type_of(body.config)
    if sent_type != row["sandbox_type"]:
        raise HTTPException(
            400,
            "Mismatched type for sandbox config update: tried to update sandbox_config of type"
            f" {row['sandbox_type']} with config of type {sent_type}",
        )
    sent = checked(body.config).model_dump(exclude_unset=True, exclude_none=True)
    merged = SHAPES[sent_type].model_validate({**row["config"], **sent})
    settings = stored(merged)
    if settings != row["config"]:
        event = SandboxConfigUpdated(sandbox_config_id=row["id"], config=settings)
        await _append(gw, row["id"], event, row["last_seq"])
        await _prepared(gw, sent_type, settings)
    return config_json(await _config_row(gw, row["id"]))


@route(router, "DELETE", f"{PREFIX}/{{sandbox_config_id}}", status_code=204)
async def delete_sandbox_config(sandbox_config_id: str, gw: GW) -> Response:
    """The configuration and its variables."""
    row = await _config_row(gw, checked_id(sandbox_config_id, "sandbox"))
    await _append(gw, row["id"], SandboxConfigDeleted(sandbox_config_id=row["id"]), row["last_seq"])
    return Response(status_code=204)


def _after(rows: list[asyncpg.Record], after: str | None) -> list[asyncpg.Record]:
    """Rows after the cursor (an unknown cursor is ignored, as everywhere in O)."""
    ids = [r["id"] for r in rows]
    return rows[ids.index(after) + 1 :] if after in ids else rows


@route(router, "GET", f"{PREFIX}/")
async def list_sandbox_configs(
    gw: GW,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    after: str | None = None,
    sandbox_type: SandboxType | None = None,
) -> list[dict[str, Any]]:
    rows = await gw.pool.fetch(
        "SELECT * FROM sandbox_configs WHERE $1::text IS NULL OR sandbox_type = $1"
        " ORDER BY created_at, id",
        sandbox_type,
    )
    return [config_json(r) for r in _after(list(rows), after)[:limit]]


# Environment variables -------------------------------------------------------------------


_ENV_VAR_ID = re.compile(
    r"^sandbox-env-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)


async def _env_var_row(gw: Gateway, env_var_id: str) -> asyncpg.Record:
    if not _ENV_VAR_ID.match(env_var_id):
        raise HTTPException(
            422, f"'{env_var_id}' is not a valid variable id (expected 'sandbox-env-<uuid4>')"
        )
    row = await gw.pool.fetchrow("SELECT * FROM sandbox_env_vars WHERE id = $1", env_var_id)
    if row is None:
        raise HTTPException(404, f"SandboxEnvironmentVariable not found with id='{env_var_id}'")
    return row


async def _key_holder(gw: Gateway, config_id: str, key: str) -> asyncpg.Record | None:
    found: asyncpg.Record | None = await gw.pool.fetchrow(
        "SELECT * FROM sandbox_env_vars WHERE sandbox_config_id = $1 AND key = $2",
        config_id,
        key,
    )
    return found


def _ciphertext(value: str) -> str:
    return encrypted({"v": value})["v"]


@route(router, "POST", f"{PREFIX}/{{sandbox_config_id}}/environment-variable")
async def create_sandbox_env_var(
    sandbox_config_id: str, body: EnvVarBody, gw: GW
) -> dict[str, Any]:
    """A variable of the configuration; a key it has already is changed (Letta's upsert)."""
    config = await _config_row(gw, checked_id(sandbox_config_id, "sandbox"))
    held = await _key_holder(gw, config["id"], body.key)
    env_var_id = held["id"] if held else f"sandbox-env-{uuid.uuid4()}"
    description = (
        body.description
        if body.description is not None
        else (held["description"] if held else None)
    )
    if held is None or (_plain(held), held["description"]) != (body.value, description):
        event = SandboxEnvVarSet(
            sandbox_config_id=config["id"],
            env_var_id=env_var_id,
            key=body.key,
            encrypted_value=_ciphertext(body.value),
            description=description,
        )
        await _append(gw, config["id"], event, config["last_seq"])
    return env_var_json(await _env_var_row(gw, env_var_id))


@route(router, "PATCH", f"{PREFIX}/environment-variable/{{env_var_id}}")
async def update_sandbox_env_var(env_var_id: str, body: EnvVarUpdateBody, gw: GW) -> dict[str, Any]:
    row = await _env_var_row(gw, env_var_id)
    config = await _config_row(gw, row["sandbox_config_id"])
    key = body.key if body.key is not None else row["key"]
    if key != row["key"] and await _key_holder(gw, config["id"], key) is not None:
        raise HTTPException(409, f"the sandbox configuration already has a variable named {key}")
    value = body.value if body.value is not None else _plain(row)
    description = body.description if body.description is not None else row["description"]
    if (key, value, description) != (row["key"], _plain(row), row["description"]):
        event = SandboxEnvVarSet(
            sandbox_config_id=config["id"],
            env_var_id=env_var_id,
            key=key,
            encrypted_value=(
                _ciphertext(body.value) if body.value is not None else row["encrypted_value"]
            ),
            description=description,
        )
        await _append(gw, config["id"], event, config["last_seq"])
    return env_var_json(await _env_var_row(gw, env_var_id))


@route(router, "DELETE", f"{PREFIX}/environment-variable/{{env_var_id}}", status_code=204)
async def delete_sandbox_env_var(env_var_id: str, gw: GW) -> Response:
    row = await _env_var_row(gw, env_var_id)
    config = await _config_row(gw, row["sandbox_config_id"])
    event = SandboxEnvVarDeleted(sandbox_config_id=config["id"], env_var_id=env_var_id)
    await _append(gw, config["id"], event, config["last_seq"])
    return Response(status_code=204)


@route(router, "GET", f"{PREFIX}/{{sandbox_config_id}}/environment-variable")
async def list_sandbox_env_vars(
    sandbox_config_id: str,
    gw: GW,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    after: str | None = None,
) -> list[dict[str, Any]]:
    """(An unknown configuration has none, as in Letta.)"""
    rows = await gw.pool.fetch(
        "SELECT * FROM sandbox_env_vars WHERE sandbox_config_id = $1 ORDER BY created_at, id",
        checked_id(sandbox_config_id, "sandbox"),
    )
    return [env_var_json(r) for r in _after(list(rows), after)[:limit]]
