"""POST /v1/agents/{agent_id}/generate: one completion with the agent's model, kept nowhere."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import Field, field_validator

from o_contracts.models import Usage
from o_contracts.requests import Generate
from o_gateway import render
from o_gateway.model_calls import generate as ask_model
from o_gateway.models_config import override_handle
from o_gateway.routes.paths import route
from o_gateway.schemas import Body, Name, Object, Text
from o_gateway.state import GW, checked_id
from o_runtime import provider_registry

router = APIRouter()


class GenerateBody(Body):
    prompt: Text = Field(min_length=1)
    system_prompt: Text | None = None
    override_model: Name | None = None
    response_schema: Object | None = None

    @field_validator("prompt")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("prompt cannot be empty or whitespace-only")
        return v

    @field_validator("response_schema")
    @classmethod
    def _object_schema(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        # It is asked for as a tool call's arguments, which every provider wants as an
        # object schema: anything else would only fail at the provider.
        if v is not None and (
            v.get("type") != "object" or not isinstance(v.get("properties", {}), dict)
        ):
            raise ValueError('response_schema must be a JSON Schema with "type": "object"')
        return v


@route(router, "POST", "/v1/agents/{agent_id}/generate")
async def generate(agent_id: str, body: GenerateBody, gw: GW) -> dict[str, Any]:
    agent = await gw.agent_row(checked_id(agent_id, "agent"))
    if body.override_model:
        # As Letta: the other model with its own defaults, not the agent's settings.
        await provider_registry.ensure_handle(body.override_model, gw.pool)
        request = Generate(handle=override_handle(body.override_model), prompt=body.prompt)
    else:
        llm_config = dict(agent["llm_config"])
        request = Generate(
            handle=str(llm_config.get("handle") or ""), llm_config=llm_config, prompt=body.prompt
        )
    request.system_prompt = body.system_prompt
    request.response_schema = body.response_schema
    answer = await ask_model(gw, request)
    used = Usage(
        prompt_tokens=answer.prompt_tokens,
        completion_tokens=answer.completion_tokens,
        total_tokens=answer.prompt_tokens + answer.completion_tokens,
    )
    return {"content": answer.content, "model": answer.model, "usage": render.usage(used, 1, [])}
