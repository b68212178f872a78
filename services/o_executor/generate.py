"""One completion with an agent's model, outside any run (POST /v1/agents/{id}/generate).

Letta's generate asks the provider directly: the prompt as a user message (after an
optional system prompt), the agent's model settings, no memory, no tools, nothing
kept. A response schema is asked for as a forced call of a tool whose parameters are
that schema, and the call's arguments are the answer.
"""

from __future__ import annotations

from typing import Any

from o_contracts.requests import Generate, Generated
from o_executor import llm
from o_executor.model_settings import ModelSettings
from o_executor.providers import Handle, UnknownProvider

RESPONSE_TOOL = "structured_response"


def _schema_tool(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": RESPONSE_TOOL,
            "description": "Answer with a value that follows this schema.",
            "parameters": schema,
        },
    }


async def generate(request: Generate, retries: llm.Retries) -> Generated:
    try:
        handle = Handle.parse(request.handle)
    except UnknownProvider as exc:
        return Generated(ok=False, status=404, error=str(exc))
    messages: list[dict[str, Any]] = []
    if request.system_prompt:
        messages.append({"role": "system", "content": request.system_prompt})
    messages.append({"role": "user", "content": request.prompt})
    settings = ModelSettings.from_llm_config(request.llm_config)
    tools = [_schema_tool(request.response_schema)] if request.response_schema else []
    try:
        result = await llm.complete(
            handle, messages, tools, settings=settings, force_tool=bool(tools), retries=retries
        )
    except UnknownProvider as exc:
        return Generated(ok=False, status=404, error=str(exc))
    except llm.LLMError as exc:
        return Generated(ok=False, status=502, error=f"LLM provider error: {exc}")
    content = result.content or ""
    if tools:
        answer = next((c for c in result.tool_calls if c.name == RESPONSE_TOOL), None)
        if answer is None:
            return Generated(ok=False, status=502, error="the model gave no structured response")
        content = answer.arguments
    return Generated(
        ok=True,
        content=content,
        model=handle.model,
        prompt_tokens=result.usage.prompt_tokens,
        completion_tokens=result.usage.completion_tokens,
    )
