"""Which providers the environment configures (o_runtime/llm_providers.py)."""

from __future__ import annotations

from o_runtime.llm_providers import _configured, context_window


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


def test_lettas_environment_configures_the_same_handles() -> None:
    """A Letta server's provider variables, as its operators set them."""
    found = _configured(
        {
            "GEMINI_API_KEY": "g",
            "DEEPSEEK_API_KEY": "d",
            "XAI_API_KEY": "x",
            "TOGETHER_API_KEY": "t",
            "ZAI_API_KEY": "z",
            "VLLM_API_BASE": "http://gpu:8000",
            "SGLANG_API_BASE": "http://gpu:30000/v1/",
            "LMSTUDIO_BASE_URL": "http://desk:1234",
            "OPENAI_API_BASE": "http://proxy/v1",
        }
    )
    assert found["google_ai"].base_url == (
        "https://generativelanguage.googleapis.com/v1beta/openai"
    )
    assert (found["google_ai"].api_key, found["google_ai"].protocol) == ("g", "openai")
    assert found["deepseek"].base_url == "https://api.deepseek.com/v1"
    assert found["xai"].base_url == "https://api.x.ai/v1"
    assert found["together"].base_url == "https://api.together.xyz/v1"
    assert found["zai"].base_url == "https://api.z.ai/api/paas/v4"
    # Letta adds /v1 to its local servers' addresses.
    assert found["vllm"].base_url == "http://gpu:8000/v1"
    assert found["sglang"].base_url == "http://gpu:30000/v1"
    assert found["lmstudio_openai"].base_url == "http://desk:1234/v1"
    assert found["openai"].base_url == "http://proxy/v1"
    assert found["openai"].api_key is None


def test_gemini_s_api_root_means_its_openai_endpoint() -> None:
    root = _configured({"GEMINI_API_KEY": "g", "GEMINI_BASE_URL": "https://proxy.example/"})
    assert root["google_ai"].base_url == "https://proxy.example/v1beta/openai"
    own = _configured({"GEMINI_BASE_URL": "http://127.0.0.1:9000/v1"})
    assert own["google_ai"].base_url == "http://127.0.0.1:9000/v1"


def test_gemini_models_have_their_window() -> None:
    config = _configured({"GEMINI_API_KEY": "g"})["google_ai"]
    assert context_window("gemini-2.0-flash", config) == 1048576
