"""Model providers registered through the API (Letta's bring-your-own-key): checked,
registered with the models they list, used by an agent with their own key, rotated,
refreshed and deleted; the key never in the log."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from o_contracts import subjects
from tests.e2e.conftest import System
from tests.e2e.support import brought_provider, new_agent, register_provider, send, subject_events
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

KEY = "sk-byok-first"


@pytest.fixture(scope="module")
def byok() -> Iterator[FakeOpenAI]:
    with brought_provider(KEY) as fake:
        yield fake


async def test_a_registered_provider_serves_an_agent_with_its_own_key(
    system: System, llm: FakeOpenAI, byok: FakeOpenAI
) -> None:
    http = system.http
    # A key is checked by asking the provider for its models with it.
    wrong = await http.post(
        "/v1/providers/check",
        json={"provider_type": "openai", "api_key": "sk-wrong", "base_url": byok.base_url},
    )
    assert wrong.status_code == 401 and "Invalid api key" in wrong.json()["detail"], wrong.text
    right = await http.post(
        "/v1/providers/check",
        json={"provider_type": "openai", "api_key": f" {KEY} ", "base_url": byok.base_url},
    )
    assert right.json() == {"message": "Valid api key for provider_type=openai"}, right.text

    provider = await register_provider(system, "my-lab", byok.base_url, KEY)
    assert provider["id"].startswith("provider-") and provider["provider_category"] == "byok"
    assert provider["api_key"] == "****" and provider["last_synced"] is not None
    assert [p["name"] for p in (await http.get("/v1/providers/")).json()] == ["my-lab"]

    # Its chat models are handles like any other.
    listing = (await http.get("/v1/models/")).json()
    models = {m["handle"]: m for m in listing}
    # The operator's providers first, as Letta lists its base providers first.
    categories = [m["provider_category"] for m in listing]
    assert categories == sorted(categories), categories
    assert models["my-lab/lab-chat"]["provider_category"] == "byok"
    assert models["openai/gpt-4o-mini"]["provider_category"] == "base"
    mine = models["my-lab/lab-chat"]
    assert (mine["name"], mine["provider_name"], mine["provider_type"], mine["model_type"]) == (
        "lab-chat",
        "my-lab",
        "openai",
        "llm",
    )
    assert mine["max_context_window"] == mine["context_window"] > 0
    for narrowed in ({"provider_category": "byok"}, {"provider_name": "my-lab"}):
        listed = (await http.get("/v1/models/", params=narrowed)).json()
        assert [m["handle"] for m in listed] == ["my-lab/lab-chat"], narrowed
    based = (await http.get("/v1/models/", params={"provider_category": "base"})).json()
    assert based and all(m["provider_category"] == "base" for m in based)
    # Its embedding models are offered as embedding models (tests/e2e/test_provider_embeddings).
    embedding = [m["handle"] for m in (await http.get("/v1/models/embedding")).json()]
    assert [h for h in embedding if h.startswith("my-lab/")] == ["my-lab/lab-embed-small"]

    agent = await new_agent(system, model="my-lab/lab-chat")
    assert agent["llm_config"]["provider_category"] == "byok"
    byok.push(Reply(content="from my lab"))
    reply = await send(system, agent["id"], "hello")
    assert [
        m["content"] for m in reply["messages"] if m["message_type"] == "assistant_message"
    ] == ["from my lab"]
    assert byok.requests[-1]["model"] == "lab-chat" and llm.requests == []

    # A new key is used from the next model call on (the old one is refused now).
    byok.api_key = "sk-byok-second"
    rotated = await http.patch(
        f"/v1/providers/{provider['id']}", json={"api_key": "sk-byok-second"}
    )
    assert rotated.status_code == 200, rotated.text
    byok.push(Reply(content="still mine"))
    reply = await send(system, agent["id"], "again")
    assert reply["messages"][-1]["content"] == "still mine", reply

    # A refresh records what the provider lists now.
    byok.models.append("lab-chat-2")
    refreshed = await http.patch(f"/v1/providers/{provider['id']}/refresh")
    assert refreshed.status_code == 200, refreshed.text
    assert "my-lab/lab-chat-2" in {m["handle"] for m in (await http.get("/v1/models/")).json()}

    # The key is in the log only as ciphertext.
    async with subject_events(system, subjects.provider_subject(provider["id"])) as events:
        await events.wait_for("ProviderModelsSynced", 2)
        logged = json.dumps([e.data.model_dump(mode="json") for e in events.seen])
    assert KEY not in logged and "sk-byok-second" not in logged
    assert "encrypted_api_key" in logged

    deleted = await http.delete(f"/v1/providers/{provider['id']}")
    assert deleted.json() == {"message": f"Provider id={provider['id']} successfully deleted"}
    assert (await http.get(f"/v1/providers/{provider['id']}")).status_code == 404
    assert "my-lab/lab-chat" not in {m["handle"] for m in (await http.get("/v1/models/")).json()}
    # Its agent's next call fails as a model call does (the executor logs that the
    # provider is not configured); the provider is not asked.
    asked = len(byok.requests)
    failed = await http.post(
        f"/v1/agents/{agent['id']}/messages", json={"messages": [{"role": "user", "content": "?"}]}
    )
    assert failed.json()["stop_reason"]["stop_reason"] == "llm_api_error", failed.text
    assert len(byok.requests) == asked


async def test_bad_provider_requests_are_refused_with_a_reason(
    system: System, byok: FakeOpenAI
) -> None:
    http = system.http
    body = {"name": "twice", "provider_type": "openai", "api_key": KEY, "base_url": byok.base_url}
    assert (await http.post("/v1/providers/", json=body)).status_code == 200
    again = await http.post("/v1/providers/", json=body)
    assert again.status_code == 409 and "already exists" in again.json()["detail"]
    base = await http.post("/v1/providers/", json={**body, "name": "openai"})
    assert base.status_code == 400 and "conflicts with an existing base provider" in base.text
    slash = await http.post("/v1/providers/", json={**body, "name": "a/b"})
    assert slash.status_code == 422 and "name/model" in slash.text
    bedrock = await http.post(
        "/v1/providers/", json={**body, "name": "g", "provider_type": "bedrock"}
    )
    assert bedrock.status_code == 400 and "not supported by O" in bedrock.json()["detail"]
    local = await http.post(
        "/v1/providers/", json={"name": "v", "provider_type": "vllm", "api_key": "x"}
    )
    assert local.status_code == 400 and "needs a base_url" in local.json()["detail"]
    empty = await http.post("/v1/providers/check", json={"provider_type": "openai", "api_key": " "})
    assert empty.status_code == 400 and empty.json()["detail"] == "API key is required!"
    missing = "provider-00000000-0000-4000-8000-000000000000"
    assert (await http.get(f"/v1/providers/{missing}")).status_code == 404
    assert (await http.get("/v1/providers/not-an-id")).status_code == 422
    unreachable = await http.post(
        "/v1/providers/check",
        json={"provider_type": "openai", "api_key": KEY, "base_url": "http://127.0.0.1:9/v1"},
    )
    assert unreachable.status_code == 502 and "did not answer" in unreachable.json()["detail"]
