"""Providers registered through the API: which types O calls and how, and how a
process sees them beside the operator's (o_runtime/provider_types.py,
provider_registry.py, llm_providers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet

from o_gateway.mcp_registry import refused_address
from o_runtime import llm_providers, tool_secrets
from o_runtime.provider_registry import config_of
from o_runtime.provider_types import UnsupportedProvider, base_url_for, provider_type


@pytest.fixture
def registered() -> Iterator[None]:
    yield
    llm_providers.replace_registered({})


def test_types_o_calls_and_those_it_refuses() -> None:
    assert provider_type("anthropic").protocol == "anthropic"
    assert provider_type("groq").protocol == "openai"
    assert base_url_for("openai", None) == "https://api.openai.com/v1"
    assert base_url_for("openai", "http://proxy/v1") == "http://proxy/v1"
    with pytest.raises(UnsupportedProvider, match="needs a base_url"):
        base_url_for("vllm", None)
    # Gemini through its OpenAI-compatible endpoint; Vertex and Bedrock are not served.
    assert base_url_for("google_ai", None).endswith("/v1beta/openai")
    with pytest.raises(UnsupportedProvider, match="'google_vertex' is not supported by O"):
        provider_type("google_vertex")


def test_a_refused_base_url_names_its_field() -> None:
    reason = refused_address("http://127.0.0.1:8000/v1", False, "base_url")
    assert reason == "base_url is not a public address: 127.0.0.1"
    assert refused_address("http://127.0.0.1:8000/v1", True, "base_url") is None


def test_a_row_becomes_a_byok_provider_with_its_key_decrypted(
    monkeypatch: pytest.MonkeyPatch, registered: None
) -> None:
    monkeypatch.setenv(tool_secrets.KEY_ENV, Fernet.generate_key().decode())
    ciphertext = tool_secrets.encrypt_all({"api_key": "sk-mine"})["api_key"]
    row = {
        "name": "mine",
        "provider_type": "deepseek",
        "base_url": None,
        "encrypted_api_key": ciphertext,
        "models": ["deepseek-chat"],
        "embedding_models": [],
    }
    config = config_of(row)
    assert config is not None
    assert (config.api_key, config.base_url, config.category) == (
        "sk-mine",
        "https://api.deepseek.com/v1",
        "byok",
    )
    assert config.endpoint_type == "deepseek" and config.models == ("deepseek-chat",)
    # Under another key the ciphertext does not decrypt: no key (the provider says 401).
    monkeypatch.setenv(tool_secrets.KEY_ENV, Fernet.generate_key().decode())
    again = config_of(row)
    assert again is not None and again.api_key is None
    assert config_of({**row, "provider_type": "bedrock"}) is None

    llm_providers.set_registered("mine", config)
    assert llm_providers.provider("mine") is config
    llm_providers.set_registered("mine", None)
    with pytest.raises(llm_providers.ProviderNotConfigured):
        llm_providers.provider("mine")
