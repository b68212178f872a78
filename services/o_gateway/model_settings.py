"""Letta's `model_settings` (on agent create and update): parsed, folded into the agent's
llm_config, and shown back on AgentState.

Letta keeps an agent's settings in its llm_config and derives `model_settings` from
it; a request's model_settings are applied with that provider type's defaults
(Letta's OpenAIModelSettings, AnthropicModelSettings, ...), except `max_output_tokens`,
which changes max_tokens only when the client sent it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from o_contracts.limits import MAX_OBJECT_BYTES, check_storable


def _bounded(value: dict[str, Any]) -> dict[str, Any]:
    check_storable(value, max_bytes=MAX_OBJECT_BYTES)
    return value


# A JSON schema given by the client (bounded as schemas.Object, which imports this module).
JsonSchema = Annotated[dict[str, Any], AfterValidator(_bounded)]

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class _Settings(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ResponseFormatBody(_Settings):
    type: Literal["text", "json_object", "json_schema"] = "text"
    # {"name", "schema", "strict"?}, as OpenAI takes it.
    json_schema: JsonSchema | None = None


class OpenAIReasoningBody(_Settings):
    reasoning_effort: ReasoningEffort = "minimal"


class AnthropicThinkingBody(_Settings):
    type: Literal["enabled", "disabled"] = "enabled"
    budget_tokens: int = Field(default=1024, ge=0, le=1_000_000)


class ModelSettingsBody(_Settings):
    """Every provider type's fields in one model; each type applies its own (Letta's
    defaults per type are in `to_llm_config`)."""

    provider_type: str = Field(default="openai", max_length=64)
    max_output_tokens: int = Field(default=4096, ge=1, le=10_000_000)
    parallel_tool_calls: bool = True
    temperature: float | None = Field(default=None, ge=0, le=2)
    reasoning: OpenAIReasoningBody | None = None
    thinking: AnthropicThinkingBody | None = None
    response_format: ResponseFormatBody | None = None
    strict: bool | None = None
    effort: Literal["low", "medium", "high", "max"] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


def to_llm_config(settings: ModelSettingsBody) -> dict[str, Any]:
    """The llm_config fields these settings set (Letta's _to_legacy_config_params)."""
    kind = settings.provider_type
    out: dict[str, Any] = {"parallel_tool_calls": settings.parallel_tool_calls}
    if "max_output_tokens" in settings.model_fields_set:
        out["max_tokens"] = settings.max_output_tokens
    response_format = (
        settings.response_format.model_dump(exclude_none=True)
        if settings.response_format is not None
        else None
    )
    if kind == "anthropic":
        thinking = settings.thinking or AnthropicThinkingBody()
        out |= {
            "temperature": 1.0 if settings.temperature is None else settings.temperature,
            "enable_reasoner": thinking.type == "enabled",
            "max_reasoning_tokens": thinking.budget_tokens,
            "effort": settings.effort,
            "verbosity": settings.verbosity,
            "response_format": response_format,
            "strict": bool(settings.strict),
        }
    else:
        # OpenAI and every OpenAI-compatible type (groq, openrouter, xai, ...).
        reasoning = settings.reasoning or OpenAIReasoningBody(reasoning_effort="high")
        out |= {
            "temperature": 0.7 if settings.temperature is None else settings.temperature,
            "reasoning_effort": reasoning.reasoning_effort,
            "response_format": response_format,
            "strict": True if settings.strict is None else settings.strict,
        }
    return out


def model_settings(llm_config: dict[str, Any]) -> dict[str, Any]:
    """AgentState.model_settings, from the llm_config (Letta's _to_model_settings)."""
    common = {
        "max_output_tokens": llm_config.get("max_tokens") or 4096,
        "parallel_tool_calls": bool(llm_config.get("parallel_tool_calls")),
        "temperature": llm_config.get("temperature"),
        "response_format": llm_config.get("response_format"),
        "strict": bool(llm_config.get("strict")),
    }
    if llm_config.get("model_endpoint_type") == "anthropic":
        return common | {
            "provider_type": "anthropic",
            "thinking": {
                "type": "enabled" if llm_config.get("enable_reasoner") else "disabled",
                "budget_tokens": llm_config.get("max_reasoning_tokens") or 1024,
            },
            "effort": llm_config.get("effort"),
            "verbosity": llm_config.get("verbosity"),
        }
    return common | {
        "provider_type": "openai",
        "reasoning": {"reasoning_effort": llm_config.get("reasoning_effort") or "minimal"},
    }
