"""Which LLM providers are configured: read by the gateway (handles, /v1/models) and the executor.

A model handle is `<provider>/<model>`. Built-in providers are configured from
the environment:

| provider        | protocol  | key                | base URL (default)                          |
|-----------------|-----------|--------------------|---------------------------------------------|
| openai          | openai    | OPENAI_API_KEY     | OPENAI_BASE_URL, OPENAI_API_BASE (OpenAI's) |
| anthropic       | anthropic | ANTHROPIC_API_KEY  | ANTHROPIC_BASE_URL (api.anthropic.com)      |
| google_ai       | openai    | GEMINI_API_KEY     | GEMINI_BASE_URL (its OpenAI endpoint)       |
| groq            | openai    | GROQ_API_KEY       | GROQ_BASE_URL (api.groq.com/openai/v1)      |
| openrouter      | openai    | OPENROUTER_API_KEY | OPENROUTER_BASE_URL (openrouter.ai/api/v1)  |
| together        | openai    | TOGETHER_API_KEY   | TOGETHER_BASE_URL (api.together.xyz/v1)     |
| deepseek        | openai    | DEEPSEEK_API_KEY   | DEEPSEEK_BASE_URL (api.deepseek.com/v1)     |
| xai             | openai    | XAI_API_KEY        | XAI_BASE_URL (api.x.ai/v1)                  |
| zai             | openai    | ZAI_API_KEY        | ZAI_BASE_URL (api.z.ai/api/paas/v4)         |
| ollama          | openai    | (none)             | OLLAMA_BASE_URL (must be set)               |
| vllm            | openai    | VLLM_API_KEY       | VLLM_BASE_URL, VLLM_API_BASE (must be set)  |
| sglang          | openai    | (none)             | SGLANG_API_BASE (must be set)               |
| lmstudio_openai | openai    | (none)             | LMSTUDIO_BASE_URL (must be set)             |

The names and variables are Letta's (its `GEMINI_API_KEY` makes `google_ai/<model>`
handles, `VLLM_API_BASE` a `vllm` provider...), so a Letta server's environment configures
the same handles here. Letta's `VLLM_API_BASE`, `SGLANG_API_BASE` and `LMSTUDIO_BASE_URL`
may name the server without its `/v1` (it is added, as Letta adds it); Google's models are
called through Gemini's OpenAI-compatible endpoint, so `GEMINI_BASE_URL` set to the API's
root (Letta's default) means that endpoint under it.

A provider counts as configured when its key (or, for local servers, its base
URL) is set. Any other name is a user-named provider, from a JSON file named
by O_PROVIDERS_FILE:

    {"providers": [{"name": "lab", "type": "openai", "base_url": "http://gpu:8000/v1",
                    "api_key_env": "LAB_KEY", "models": ["qwen3-32b"],
                    "context_window": 32768}]}

or from the environment: O_PROVIDER_<NAME>_BASE_URL, O_PROVIDER_<NAME>_API_KEY,
O_PROVIDER_<NAME>_TYPE (openai or anthropic, default openai).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

Protocol = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    protocol: Protocol
    base_url: str | None
    api_key: str | None
    # Models to list when the provider's own /models cannot be asked.
    models: tuple[str, ...] = ()
    embedding_models: tuple[str, ...] = ()
    context_window: int | None = None
    # The `model_endpoint_type` Letta shows for it.
    endpoint_type: str = field(default="openai")
    # Letta's provider_category: "base" (the operator's) or "byok" (registered through
    # the API: provider_registry.py).
    category: str = "base"
    # A registered provider's Letta provider_type (None: the operator's, named by endpoint).
    provider_type: str | None = None


@dataclass(frozen=True)
class _Builtin:
    protocol: Protocol
    key_env: str | None
    # Where its address may be set, first found wins.
    url_envs: tuple[str, ...]
    default_url: str | None
    needs_key: bool = True
    # How an address set for it becomes the one to call (see _with_v1, _gemini_openai).
    normalize: Callable[[str], str] | None = None


def _with_v1(url: str) -> str:
    """Letta's local servers' addresses may leave out `/v1`: it adds it."""
    stripped = url.rstrip("/")
    return stripped if stripped.endswith("/v1") else stripped + "/v1"


GEMINI_OPENAI_PATH = "/v1beta/openai"


def _gemini_openai(url: str) -> str:
    """Gemini's API root (Letta's GEMINI_BASE_URL) as its OpenAI-compatible endpoint; an
    address with a path of its own (a proxy's) is called as it is."""
    stripped = url.rstrip("/")
    return stripped + GEMINI_OPENAI_PATH if not urlsplit(stripped).path else stripped


BUILTINS: dict[str, _Builtin] = {
    "openai": _Builtin(
        "openai",
        "OPENAI_API_KEY",
        ("OPENAI_BASE_URL", "OPENAI_API_BASE"),
        "https://api.openai.com/v1",
    ),
    "anthropic": _Builtin(
        "anthropic", "ANTHROPIC_API_KEY", ("ANTHROPIC_BASE_URL",), "https://api.anthropic.com"
    ),
    "google_ai": _Builtin(
        "openai",
        "GEMINI_API_KEY",
        ("GEMINI_BASE_URL",),
        "https://generativelanguage.googleapis.com" + GEMINI_OPENAI_PATH,
        normalize=_gemini_openai,
    ),
    "groq": _Builtin(
        "openai", "GROQ_API_KEY", ("GROQ_BASE_URL",), "https://api.groq.com/openai/v1"
    ),
    "openrouter": _Builtin(
        "openai", "OPENROUTER_API_KEY", ("OPENROUTER_BASE_URL",), "https://openrouter.ai/api/v1"
    ),
    "together": _Builtin(
        "openai", "TOGETHER_API_KEY", ("TOGETHER_BASE_URL",), "https://api.together.xyz/v1"
    ),
    "deepseek": _Builtin(
        "openai", "DEEPSEEK_API_KEY", ("DEEPSEEK_BASE_URL",), "https://api.deepseek.com/v1"
    ),
    "xai": _Builtin("openai", "XAI_API_KEY", ("XAI_BASE_URL",), "https://api.x.ai/v1"),
    "zai": _Builtin("openai", "ZAI_API_KEY", ("ZAI_BASE_URL",), "https://api.z.ai/api/paas/v4"),
    "ollama": _Builtin("openai", None, ("OLLAMA_BASE_URL",), None, needs_key=False),
    "vllm": _Builtin(
        "openai",
        "VLLM_API_KEY",
        ("VLLM_BASE_URL", "VLLM_API_BASE"),
        None,
        needs_key=False,
        normalize=_with_v1,
    ),
    "sglang": _Builtin(
        "openai", None, ("SGLANG_API_BASE",), None, needs_key=False, normalize=_with_v1
    ),
    "lmstudio_openai": _Builtin(
        "openai", None, ("LMSTUDIO_BASE_URL",), None, needs_key=False, normalize=_with_v1
    ),
}
_ENV_PROVIDER = re.compile(r"^O_PROVIDER_([A-Z0-9_]+)_BASE_URL$")


class ProviderNotConfigured(ValueError):
    pass


def _from_file(path: str, env: Mapping[str, str]) -> list[ProviderConfig]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ProviderNotConfigured(f"O_PROVIDERS_FILE {path}: {exc}") from exc
    out = []
    for entry in data.get("providers", []):
        protocol = entry.get("type", "openai")
        if protocol not in ("openai", "anthropic") or not entry.get("name"):
            raise ProviderNotConfigured(f"O_PROVIDERS_FILE {path}: bad provider entry {entry!r}")
        key = entry.get("api_key") or env.get(entry.get("api_key_env") or "", None)
        out.append(
            ProviderConfig(
                name=str(entry["name"]),
                protocol=protocol,
                base_url=entry.get("base_url"),
                api_key=key,
                models=tuple(entry.get("models", ())),
                embedding_models=tuple(entry.get("embedding_models", ())),
                context_window=entry.get("context_window"),
                endpoint_type=protocol,
            )
        )
    return out


# Providers registered through the API, as this process last read them
# (provider_registry.py keeps it; the operator's providers win a name they share).
_registered: dict[str, ProviderConfig] = {}


def set_registered(name: str, config: ProviderConfig | None) -> None:
    """This process's view of one registered provider (None: there is none by that name)."""
    if config is None:
        _registered.pop(name, None)
    else:
        _registered[name] = config


def replace_registered(configs: Mapping[str, ProviderConfig]) -> None:
    _registered.clear()
    _registered.update(configs)


def operators(env: Mapping[str, str] | None = None) -> dict[str, ProviderConfig]:
    """The providers the operator configured (environment, O_PROVIDERS_FILE) by name."""
    return _from_environ() if env is None else _configured(env)


def configured(env: Mapping[str, str] | None = None) -> dict[str, ProviderConfig]:
    """Every configured provider by name: the operator's (this process's environment is
    read once) and, for this process's environment, those registered through the API."""
    if env is not None:
        return _configured(env)
    operators = _from_environ()
    # (The operator's first, as Letta lists its base providers before the others.)
    return operators | {n: c for n, c in _registered.items() if n not in operators}


@cache
def _from_environ() -> dict[str, ProviderConfig]:
    return _configured(os.environ)


def _configured(env: Mapping[str, str]) -> dict[str, ProviderConfig]:
    found: dict[str, ProviderConfig] = {}
    for name, b in BUILTINS.items():
        key = env.get(b.key_env) if b.key_env else None
        own = next((env[v] for v in b.url_envs if env.get(v)), None)
        if own and b.normalize is not None:
            own = b.normalize(own)
        url = own or b.default_url
        # A base URL of one's own (a local OpenAI-compatible server, a proxy)
        # configures the provider even without a key; the provider's own
        # endpoint needs one.
        if (b.needs_key and not key and not own) or not url:
            continue
        found[name] = ProviderConfig(
            name, b.protocol, url, key, endpoint_type=name if name != "vllm" else "vllm"
        )
    for var, url in env.items():
        match = _ENV_PROVIDER.match(var)
        if match and url:
            raw = match.group(1)
            protocol = env.get(f"O_PROVIDER_{raw}_TYPE", "openai")
            if protocol not in ("openai", "anthropic"):
                raise ProviderNotConfigured(f"O_PROVIDER_{raw}_TYPE must be openai or anthropic")
            name = raw.lower().replace("_", "-")
            found[name] = ProviderConfig(
                name,
                protocol,  # type: ignore[arg-type]
                url,
                env.get(f"O_PROVIDER_{raw}_API_KEY"),
                endpoint_type=protocol,
            )
    if env.get("O_PROVIDERS_FILE"):
        for p in _from_file(env["O_PROVIDERS_FILE"], env):
            found[p.name] = p
    return found


def provider(name: str, env: Mapping[str, str] | None = None) -> ProviderConfig:
    providers = configured(env)
    if name not in providers:
        known = ", ".join(sorted(providers)) or "none"
        raise ProviderNotConfigured(
            f"model provider '{name}' is not configured (configured: {known})"
        )
    return providers[name]


# Context windows of well-known models; anything else gets the provider's or Letta's default.
_CONTEXT_WINDOWS = {"gpt-4o": 128000, "gpt-4o-mini": 128000, "gpt-4.1": 256000, "gpt-4": 8192}
DEFAULT_CONTEXT_WINDOW = 128000
ANTHROPIC_CONTEXT_WINDOW = 200000
# Gemini's models since 1.5 (Letta's google_ai provider gives them the same).
GEMINI_CONTEXT_WINDOW = 1048576


def context_window(model: str, config: ProviderConfig) -> int:
    """A model's context window (the gateway shows it in llm_config; a run with
    override_model keeps within it)."""
    if model in _CONTEXT_WINDOWS:
        return _CONTEXT_WINDOWS[model]
    if config.context_window:
        return config.context_window
    if config.protocol == "anthropic" or model.startswith("claude"):
        return ANTHROPIC_CONTEXT_WINDOW
    if model.startswith("gemini-"):
        return GEMINI_CONTEXT_WINDOW
    return DEFAULT_CONTEXT_WINDOW
