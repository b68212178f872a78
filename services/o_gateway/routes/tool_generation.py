"""POST /v1/tools/generate-tool: a tool written by a model from a prompt (Letta's route,
letta/server/rest_api/routers/v1/tools.py), checked as generate-schema checks source,
and answered without registering anything (tool_generation.py says what is asked and
what is refused)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException
from pydantic import Field, StringConstraints

from o_contracts.ids import new_id
from o_contracts.limits import MAX_LIST_ITEMS
from o_contracts.requests import Generate
from o_gateway.model_calls import generate
from o_gateway.models_config import override_handle
from o_gateway.routes.paths import route
from o_gateway.schemas import Body, Name, Text
from o_gateway.state import GW
from o_gateway.tool_generation import (
    DEFAULT_HANDLE,
    MAX_SOURCE_CHARS,
    RESPONSE_SCHEMA,
    SYSTEM_PROMPT,
    BadAnswer,
    read_answer,
    render_tool,
    tool_schema,
    user_prompt,
)
from o_gateway.tool_schema import ToolSourceError
from o_runtime import provider_registry

router = APIRouter()

FunctionName = Annotated[
    str, StringConstraints(min_length=1, max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
]


class GenerateToolBody(Body):
    tool_name: FunctionName
    prompt: Text = Field(min_length=1)
    handle: Name | None = None
    starter_code: Annotated[str, Field(max_length=MAX_SOURCE_CHARS)] | None = None
    # Required, as in Letta (an empty list on a first try).
    validation_errors: Annotated[list[Text], Field(max_length=MAX_LIST_ITEMS)]


@route(router, "POST", "/v1/tools/generate-tool")
async def generate_tool(body: GenerateToolBody, gw: GW) -> dict[str, Any]:
    await provider_registry.ensure_handle(body.handle or DEFAULT_HANDLE, gw.pool)
    handle = override_handle(body.handle or DEFAULT_HANDLE)
    request = Generate(
        handle=handle,
        system_prompt=SYSTEM_PROMPT,
        prompt=user_prompt(
            body.tool_name, body.prompt, body.starter_code, list(body.validation_errors)
        ),
        response_schema=RESPONSE_SCHEMA,
    )
    answer = await generate(gw, request)
    try:
        generated = read_answer(answer.content)
    except BadAnswer as exc:
        raise HTTPException(502, f"Failed to generate tool '{body.tool_name}': {exc}") from exc
    try:
        schema = tool_schema(body.tool_name, generated.source_code)
    except ToolSourceError as exc:
        # Letta's words and status; the client may ask again with this reason.
        raise HTTPException(
            400, f"Failed to generate JSON schema for tool '{body.tool_name}': {exc}"
        ) from exc
    return {
        "tool": render_tool(new_id("tool"), body.tool_name, generated, schema),
        "sample_args": generated.sample_args,
        # O asks for the call alone: there is no text beside it to show.
        "response": "",
    }
