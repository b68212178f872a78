"""Which providers the environment configures (o_runtime/llm_providers.py)."""

from __future__ import annotations

from o_runtime.llm_providers import _configured


def test_a_hosted_provider_needs_its_key() -> None:
    assert "openai" not in _configured({})
    assert _configured({"OPENAI_API_KEY": "sk-1"})["openai"].base_url == "https://api.openai.com/v1"


def test_a_base_url_of_ones_own_configures_it_without_a_key() -> None:
    # As the README's "try it with the local fake server" says.
    found = _configured({"OPENAI_BASE_URL": "http://127.0.0.1:8999/v1"})
    assert found["openai"].base_url == "http://127.0.0.1:8999/v1"
    assert found["openai"].api_key is None
    assert "groq" not in found


def test_local_servers_need_only_their_url() -> None:
    found = _configured({"OLLAMA_BASE_URL": "http://localhost:11434/v1"})
    assert found["ollama"].base_url == "http://localhost:11434/v1"
    assert "vllm" not in found
