"""Agent files: `GET|POST /v1/agents/{agent_id}/export` and `POST /v1/agents/import`.

Letta's routes and options (letta/server/rest_api/routers/v1/agents.py), on
O's agent_files package: the export reads the projections; the import reads
and checks the whole file and plans every write before the first one, so a bad
file is refused with nothing created (docs/agent-files.md).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Header, HTTPException, Response, UploadFile
from pydantic import BaseModel, Field

from o_gateway.agent_files.exporter import export_agent
from o_gateway.agent_files.importer import registry_for, write
from o_gateway.agent_files.plan import ImportOptions, plan_import
from o_gateway.agent_files.reading import read_agent_file
from o_gateway.idempotency import IdempotencyKey, checked_key, resource_id
from o_gateway.routes.paths import route
from o_gateway.schemas import Name
from o_gateway.state import GW, checked_id
from o_runtime import provider_registry

router = APIRouter()


def _indented(document: dict[str, Any]) -> Response:
    # Letta answers the file indented (its IndentedORJSONResponse): it is meant to be saved.
    body = json.dumps(document, indent=2, ensure_ascii=False)
    return Response(body.encode("utf-8"), media_type="application/json")


@route(router, "GET", "/v1/agents/{agent_id}/export")
async def export_agent_file(
    agent_id: str,
    gw: GW,
    max_steps: int = 100,  # (deprecated by Letta, unused)
    use_legacy_format: bool = False,
    conversation_id: str | None = None,
    scrub_messages: bool = False,
) -> Response:
    checked_id(agent_id, "agent")
    if use_legacy_format:
        raise HTTPException(400, "Legacy format is not supported")
    if conversation_id is not None:
        await _conversation_of(gw, agent_id, conversation_id)
    return _indented(await export_agent(gw, agent_id, conversation_id, scrub_messages))


class SkillBody(BaseModel):
    name: Name
    files: dict[str, str] | None = None
    source_url: Name | None = None


class ExportBody(BaseModel):
    skills: list[SkillBody] = Field(default_factory=list, max_length=256)
    conversation_id: Name | None = None
    scrub_messages: bool = False


@route(router, "POST", "/v1/agents/{agent_id}/export")
async def export_agent_file_with_skills(
    agent_id: str, gw: GW, body: ExportBody | None = None
) -> Response:
    """The export with the skills the client resolved (Letta's SkillSchema, kept as given)."""
    checked_id(agent_id, "agent")
    body = body or ExportBody()
    for skill in body.skills:
        if not (skill.files and "SKILL.md" in skill.files) and skill.source_url is None:
            raise HTTPException(
                422, f"skill '{skill.name}' needs files with SKILL.md or a source_url"
            )
    if body.conversation_id is not None:
        await _conversation_of(gw, agent_id, body.conversation_id)
    skills = [s.model_dump() for s in body.skills]
    return _indented(
        await export_agent(gw, agent_id, body.conversation_id, body.scrub_messages, skills)
    )


async def _conversation_of(gw: GW, agent_id: str, conversation_id: str) -> None:
    checked_id(conversation_id, "conv")
    found = await gw.pool.fetchval(
        "SELECT true FROM conversations WHERE id = $1 AND agent_id = $2 AND NOT deleted",
        conversation_id,
        agent_id,
    )
    if not found:
        raise HTTPException(404, f"Conversation {conversation_id} not found")


def _secrets(text: str | None) -> dict[str, str] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise HTTPException(400, "secrets must be a valid JSON string")
    return value


@route(router, "POST", "/v1/agents/import")
async def import_agent_file(
    gw: GW,
    file: Annotated[UploadFile, File()],
    idempotency_key: IdempotencyKey = None,
    x_override_embedding_model: Annotated[
        str | None, Header(alias="x-override-embedding-model")
    ] = None,
    override_existing_tools: Annotated[bool, Form()] = True,
    strip_messages: Annotated[bool, Form()] = False,
    secrets: Annotated[str | None, Form()] = None,
    name: Annotated[str | None, Form()] = None,
    embedding: Annotated[str | None, Form()] = None,
    model: Annotated[str | None, Form()] = None,
    append_copy_suffix: Annotated[bool, Form()] = True,
    override_name: Annotated[str | None, Form()] = None,
    override_embedding_handle: Annotated[str | None, Form()] = None,
    override_model_handle: Annotated[str | None, Form()] = None,
    # O has no projects (Letta Cloud's): accepted, unused.
    project_id: Annotated[str | None, Form()] = None,
    env_vars_json: Annotated[str | None, Form()] = None,
) -> dict[str, Any]:
    """Import an agent file; the new agents' ids, and what O left out of them (`left_out`)."""
    key = checked_key(idempotency_key)
    limit = gw.settings.max_body_bytes
    agent_file = read_agent_file(await file.read(limit + 1), limit)
    options = ImportOptions(
        append_copy_suffix=append_copy_suffix,
        name=name or override_name,
        override_existing_tools=override_existing_tools,
        strip_messages=strip_messages,
        secrets=_secrets(secrets or env_vars_json),
        model=model or override_model_handle,
        embedding=embedding or override_embedding_handle or x_override_embedding_model,
    )
    import_id = resource_id("cmd", key, "import")
    registry = await registry_for(gw, agent_file, import_id)
    # (Its agents' models may be those of providers registered through the API.)
    await provider_registry.load_all(gw.pool)
    plan = plan_import(agent_file, options, registry, import_id, key)
    await write(gw, plan)
    return {
        "agent_ids": [a.command.agent_id for a in plan.agents],
        # O's addition: what the file held that the new agents do not have, and why.
        "left_out": plan.left_out,
    }
