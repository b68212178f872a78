"""Embedding models of any provider that speaks OpenAI's protocol: one registered through
the API with its own key (Letta's bring-your-own-key), and the operator's user-named one
(`lab`, from O_PROVIDER_LAB_*); a provider O cannot embed with leaves the local model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import System
from tests.e2e.support import brought_provider, new_agent, register_provider
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.e2e

KEY = "sk-byok-embeddings"
LOCAL = "local/all-MiniLM-L6-v2"


@pytest.fixture
def byok() -> Iterator[FakeOpenAI]:
    with brought_provider(KEY) as fake:
        yield fake


async def insert(system: System, agent_id: str, text: str) -> dict[str, Any]:
    answer = await system.http.post(f"/v1/agents/{agent_id}/archival-memory", json={"text": text})
    assert answer.status_code == 200, answer.text
    (passage,) = answer.json()
    return dict(passage)


async def test_a_registered_providers_embedding_model_embeds_with_its_key(
    system: System, byok: FakeOpenAI
) -> None:
    http = system.http
    provider_id = (await register_provider(system, "emb-lab", byok.base_url, KEY))["id"]
    try:
        listed = (await http.get("/v1/models/embedding")).json()
        assert "emb-lab/lab-embed-small" in {m["handle"] for m in listed}
        chat = {m["handle"] for m in (await http.get("/v1/models/")).json()}
        assert "emb-lab/lab-chat" in chat and "emb-lab/lab-embed-small" not in chat

        agent = await new_agent(system, embedding="emb-lab/lab-embed-small")
        passage = await insert(system, agent["id"], "The staging deploy key is XK-4471.")
        assert passage["metadata"]["embedding_model"] == "emb-lab/lab-embed-small"
        (request,) = byok.embedding_requests
        assert request["model"] == "lab-embed-small"
        assert request["input"] == ["The staging deploy key is XK-4471."]
        # A search embeds its query with the same model, through the same provider.
        found = await http.get(
            f"/v1/agents/{agent['id']}/archival-memory/search", params={"query": "deploy key"}
        )
        assert found.status_code == 200, found.text
        assert [r["content"] for r in found.json()["results"]] == [
            "The staging deploy key is XK-4471."
        ]
        assert byok.embedding_requests[-1]["input"] == ["deploy key"]

        # An archive may name it too (before: only the operator's OpenAI models, else 400).
        archive = await http.post(
            "/v1/archives/", json={"name": "byok-notes", "embedding": "emb-lab/lab-embed-small"}
        )
        assert archive.status_code == 200, archive.text
        put = await http.post(
            f"/v1/archives/{archive.json()['id']}/passages", json={"text": "Archived by BYOK."}
        )
        assert put.status_code == 200, put.text
        assert put.json()["metadata"]["embedding_model"] == "emb-lab/lab-embed-small"
        assert byok.embedding_requests[-1]["input"] == ["Archived by BYOK."]
        await http.delete(f"/v1/archives/{archive.json()['id']}")
        # Its chat model is not an embedding model.
        refused = await http.post(
            "/v1/archives/", json={"name": "not-embedding", "embedding": "emb-lab/lab-chat"}
        )
        assert refused.status_code == 400, refused.text
    finally:
        assert (await http.delete(f"/v1/providers/{provider_id}")).status_code == 200


async def test_the_operators_named_provider_embeds_and_an_unknown_one_is_local(
    system: System, llm: FakeOpenAI
) -> None:
    before = len(llm.embedding_requests)
    agent = await new_agent(system, embedding="lab/text-embedding-3-small")
    passage = await insert(system, agent["id"], "Lab notes: the centrifuge is booked.")
    assert passage["metadata"]["embedding_model"] == "lab/text-embedding-3-small"
    (request,) = llm.embedding_requests[before:]
    assert request["model"] == "text-embedding-3-small"
    # A provider O does not have (an agent file's, say): the local model, as before.
    elsewhere = await new_agent(system, embedding="letta/letta-free")
    local = await insert(system, elsewhere["id"], "Kept with the local model.")
    assert local["metadata"]["embedding_model"] == LOCAL
    assert len(llm.embedding_requests) == before + 1
