"""The LLM SDKs are imported on first use (o_runtime/sdk_imports.py, issue 16's memory
target): no service imports them at start, the executor imports those of the configured
providers, and a first call through either SDK still works and still retries its errors.

Each check runs in a fresh interpreter: this test process has imported the SDKs already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ["o_gateway", "o_executor", "o_memory", "o_tool_sandbox", "o_evolution"]
SDKS = ("openai", "anthropic")
NOT_AT_START = SDKS


def run_python(code: str, env: dict[str, str] | None = None) -> dict[str, object]:
    """Run `code` in a fresh interpreter with the repository on its path; the JSON it
    prints last."""
    environ = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    environ["PYTHONPATH"] = os.pathsep.join(str(ROOT / p) for p in ("contracts", "services", "."))
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_no_service_imports_an_llm_sdk_with_its_code() -> None:
    # One interpreter for the five (each ~3 s to start): what each import added to
    # sys.modules is noted after it, so a culprit is still named.
    loaded = run_python(
        "import importlib, json, sys\n"
        "seen = {}\n"
        f"for service in {SERVICES!r}:\n"
        "    importlib.import_module(service + '.service')\n"
        f"    seen[service] = [m for m in {NOT_AT_START!r} if m in sys.modules]\n"
        "print(json.dumps(seen))"
    )
    assert loaded == {service: [] for service in SERVICES}


def test_the_executor_imports_the_sdks_of_the_configured_providers_only() -> None:
    code = (
        "import json, sys\n"
        "from o_runtime import llm_providers\n"
        "from o_runtime.sdk_imports import import_sdks\n"
        "names = import_sdks(p.protocol for p in llm_providers.configured().values())\n"
        f"print(json.dumps({{'names': names, **{{m: m in sys.modules for m in {SDKS!r}}}}}))"
    )
    openai_only = run_python(code, {"OPENAI_API_KEY": "k", "GROQ_API_KEY": "k"})
    assert openai_only == {"names": ["openai"], "openai": True, "anthropic": False}
    both = run_python(code, {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
    assert both == {"names": ["anthropic", "openai"], "openai": True, "anthropic": True}


FIRST_CALLS = """
import asyncio, json, os, sys
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI, Reply

openai_fake, anthropic_fake = FakeOpenAI(), FakeAnthropic()
openai_fake.start()
anthropic_fake.start()
os.environ.update(
    OPENAI_BASE_URL=openai_fake.base_url, OPENAI_API_KEY="k",
    ANTHROPIC_BASE_URL=anthropic_fake.base_url, ANTHROPIC_API_KEY="k",
    # Letta's variable for Gemini; an address with a path is called as it is.
    GEMINI_API_KEY="g", GEMINI_BASE_URL=openai_fake.base_url,
)
from o_executor import llm
from o_executor.providers import Handle
from o_memory.embeddings import embedder_for

out = {"before": [m for m in ("openai", "anthropic") if m in sys.modules]}
messages = [{"role": "user", "content": "hello"}]
no_wait = llm.Retries(max_retries=1, backoff=0.0)


async def main() -> None:
    anthropic_fake.push(Reply(content="from claude"))
    answer = await llm.complete(Handle("anthropic", "claude-x"), messages, [], retries=no_wait)
    out["anthropic"] = answer.content
    out["after_anthropic"] = [m for m in ("openai", "anthropic") if m in sys.modules]
    openai_fake.push(Reply(status=503), Reply(content="from gpt"))
    answer = await llm.complete(Handle("openai", "gpt-x"), messages, [], retries=no_wait)
    out["openai_after_a_retry"] = answer.content
    openai_fake.push(Reply(status=503), Reply(status=503))
    try:
        await llm.complete(Handle("openai", "gpt-x"), messages, [], retries=no_wait)
    except llm.LLMError as exc:
        out["openai_error"] = str(exc)
    openai_fake.push(Reply(content="from gemini"))
    answer = await llm.complete(Handle("google_ai", "gemini-2.0-flash"), messages, [])
    out["google_ai"] = [answer.content, openai_fake.requests[-1]["model"]]
    embedder = await embedder_for({"handle": "openai/text-embedding-3-small"})
    vectors = await embedder.embed(["a", "b"])
    out["embeddings"] = [len(v) for v in vectors]


asyncio.run(main())
openai_fake.stop()
anthropic_fake.stop()
print(json.dumps(out))
"""


def test_first_calls_import_their_sdk_and_work_as_before() -> None:
    out = run_python(FIRST_CALLS)
    assert out["before"] == []
    assert out["anthropic"] == "from claude"
    assert out["after_anthropic"] == ["anthropic"]
    assert out["openai_after_a_retry"] == "from gpt"
    assert str(out["openai_error"]).startswith("openai/gpt-x: ")
    assert str(out["openai_error"]).endswith("(after 2 attempts)")
    assert out["embeddings"] == [1536, 1536]
    # A Letta environment's google_ai handle reaches Gemini's OpenAI-compatible endpoint.
    assert out["google_ai"] == ["from gemini", "gemini-2.0-flash"]
