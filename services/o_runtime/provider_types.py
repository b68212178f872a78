"""Which of Letta's provider types O can call, and how (decisions only, no I/O).

A provider registered through the API names Letta's `provider_type`. O calls every
provider through the official `openai` SDK (an OpenAI-compatible endpoint) or the
`anthropic` SDK, so it serves the types that speak one of those protocols; the others
(Google's Vertex, Azure's, Bedrock's, Letta's own) are refused with the reason; Google's
Gemini API is called through its OpenAI-compatible endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from o_runtime.llm_providers import Protocol


@dataclass(frozen=True)
class ProviderType:
    protocol: Protocol
    # None: the provider has no public endpoint, the request must give its base_url.
    default_base_url: str | None
    # The `model_endpoint_type` Letta shows for its models.
    endpoint_type: str


TYPES: dict[str, ProviderType] = {
    "openai": ProviderType("openai", "https://api.openai.com/v1", "openai"),
    "anthropic": ProviderType("anthropic", "https://api.anthropic.com", "anthropic"),
    # Gemini through its OpenAI-compatible endpoint (o_runtime/llm_providers.py).
    "google_ai": ProviderType(
        "openai", "https://generativelanguage.googleapis.com/v1beta/openai", "google_ai"
    ),
    "groq": ProviderType("openai", "https://api.groq.com/openai/v1", "groq"),
    "openrouter": ProviderType("openai", "https://openrouter.ai/api/v1", "openai"),
    "deepseek": ProviderType("openai", "https://api.deepseek.com/v1", "deepseek"),
    "xai": ProviderType("openai", "https://api.x.ai/v1", "xai"),
    "together": ProviderType("openai", "https://api.together.xyz/v1", "together"),
    "mistral": ProviderType("openai", "https://api.mistral.ai/v1", "mistral"),
    "cerebras": ProviderType("openai", "https://api.cerebras.ai/v1", "cerebras"),
    "zai": ProviderType("openai", "https://api.z.ai/api/paas/v4", "zai"),
    "ollama": ProviderType("openai", None, "ollama"),
    "vllm": ProviderType("openai", None, "vllm"),
    "lmstudio_openai": ProviderType("openai", None, "lmstudio_openai"),
    "sglang": ProviderType("openai", None, "openai"),
}


class UnsupportedProvider(ValueError):
    pass


def provider_type(name: str) -> ProviderType:
    """The type by Letta's name; UnsupportedProvider (its message for the client) if O
    cannot call it."""
    found = TYPES.get(name)
    if found is None:
        raise UnsupportedProvider(
            f"provider_type '{name}' is not supported by O (it calls providers through the"
            f" OpenAI and Anthropic protocols): use one of {', '.join(sorted(TYPES))}"
        )
    return found


def base_url_for(name: str, base_url: str | None) -> str:
    """The address to call: the request's, else the type's public one; UnsupportedProvider
    if the type has none and the request gave none."""
    kind = provider_type(name)
    url = base_url or kind.default_base_url
    if not url:
        raise UnsupportedProvider(f"provider_type '{name}' needs a base_url")
    return url


def is_embedding_model(model: str) -> bool:
    """What O lists as an embedding model of a provider (as /v1/models/embedding does)."""
    return "embed" in model
