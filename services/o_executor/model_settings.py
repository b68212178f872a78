"""An agent's model settings as each provider's request takes them.

The agent's `llm_config` (Letta's shape, set from `model_settings` by the gateway) says
what to ask for; this module says how each wire protocol spells it, following what
Letta 0.16.8's OpenAI and Anthropic clients send, so an agent configured for Letta
gets the same requests from O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Anthropic needs max_tokens on every request; Letta's default (the smallest model's cap).
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096
# Anthropic's smallest thinking budget.
MIN_THINKING_BUDGET = 1024


@dataclass(frozen=True)
class ModelSettings:
    """What the model is asked for, whatever the provider."""

    temperature: float | None = None
    max_tokens: int | None = None
    parallel_tool_calls: bool | None = None
    # Letta's ResponseFormat: {"type": "text" | "json_object" | "json_schema", "json_schema"?}.
    response_format: Mapping[str, Any] | None = None
    # OpenAI reasoning models (o1, o3, o4, gpt-5).
    reasoning_effort: str | None = None
    # Anthropic extended thinking.
    enable_reasoner: bool = False
    max_reasoning_tokens: int = 0
    effort: str | None = None

    @classmethod
    def from_llm_config(cls, config: Mapping[str, Any]) -> ModelSettings:
        def number(key: str) -> float | None:
            value = config.get(key)
            return float(value) if isinstance(value, int | float) else None

        max_tokens = config.get("max_tokens")
        response_format = config.get("response_format")
        parallel = config.get("parallel_tool_calls")
        return cls(
            temperature=number("temperature"),
            max_tokens=int(max_tokens) if isinstance(max_tokens, int) and max_tokens > 0 else None,
            parallel_tool_calls=parallel if isinstance(parallel, bool) else None,
            response_format=response_format if isinstance(response_format, Mapping) else None,
            reasoning_effort=_str(config.get("reasoning_effort")),
            enable_reasoner=bool(config.get("enable_reasoner")),
            max_reasoning_tokens=int(config.get("max_reasoning_tokens") or 0),
            effort=_str(config.get("effort")),
        )


# Nothing asked for: the provider's defaults (a summary asks this way).
DEFAULTS = ModelSettings()


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def is_openai_reasoner(model: str) -> bool:
    """OpenAI's reasoning models: no temperature, no parallel tool calls, reasoning_effort."""
    return model.startswith(("o1", "o3", "o4", "gpt-5"))


def openai_params(settings: ModelSettings, model: str, has_tools: bool) -> dict[str, Any]:
    """Chat Completions parameters for these settings."""
    params: dict[str, Any] = {}
    reasoner = is_openai_reasoner(model)
    if settings.max_tokens is not None:
        params["max_completion_tokens"] = settings.max_tokens
    # Reasoning models refuse any temperature but their own.
    if settings.temperature is not None and not reasoner:
        params["temperature"] = settings.temperature
    if reasoner and settings.reasoning_effort and settings.reasoning_effort != "none":
        params["reasoning_effort"] = settings.reasoning_effort
    if has_tools and not reasoner and settings.parallel_tool_calls is not None:
        params["parallel_tool_calls"] = settings.parallel_tool_calls
    fmt = settings.response_format
    if fmt is not None:
        if fmt.get("type") == "json_schema":
            params["response_format"] = {"type": "json_schema", "json_schema": fmt["json_schema"]}
        elif fmt.get("type") in ("json_object", "text"):
            params["response_format"] = {"type": fmt["type"]}
    return params


def is_anthropic_thinker(model: str) -> bool:
    """Claude models with extended thinking (3.7 Sonnet and every model from the 4 family)."""
    return model.startswith("claude-3-7") or (
        model.startswith("claude-") and not model.startswith(("claude-3", "claude-2", "claude-i"))
    )


def anthropic_params(settings: ModelSettings, model: str) -> dict[str, Any]:
    """Messages API parameters for these settings (tool_choice is the caller's)."""
    params: dict[str, Any] = {"max_tokens": settings.max_tokens or ANTHROPIC_DEFAULT_MAX_TOKENS}
    if settings.temperature is not None:
        params["temperature"] = settings.temperature
    if settings.enable_reasoner and is_anthropic_thinker(model):
        budget = max(settings.max_reasoning_tokens, MIN_THINKING_BUDGET)
        params["thinking"] = {"type": "enabled", "budget_tokens": budget}
        # The budget is part of max_tokens, which must exceed it.
        params["max_tokens"] = max(params["max_tokens"], budget + 1)
        # Anthropic allows no other temperature with thinking.
        params["temperature"] = 1.0
    output: dict[str, Any] = {}
    if settings.effort is not None:
        output["effort"] = settings.effort
    fmt = settings.response_format
    if fmt is not None and fmt.get("type") == "json_schema":
        # Anthropic's structured outputs take the schema itself (Letta 0.16.8 leaves
        # it out; O sends it, so a Claude agent's reply follows the schema too).
        schema = (fmt.get("json_schema") or {}).get("schema")
        if isinstance(schema, Mapping):
            output["format"] = {"type": "json_schema", "schema": dict(schema)}
    if output:
        params["output_config"] = output
    return params


def anthropic_tool_choice(
    settings: ModelSettings, force_tool: bool, thinking: bool
) -> dict[str, Any]:
    """Anthropic's tool_choice: parallel calls only when the settings allow them (as Letta,
    which disables them unless asked); thinking forbids forcing a tool."""
    choice: dict[str, Any] = {"type": "any" if force_tool and not thinking else "auto"}
    if not settings.parallel_tool_calls:
        choice["disable_parallel_tool_use"] = True
    return choice
