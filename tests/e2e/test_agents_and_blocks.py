"""Agents and core memory blocks through the official letta-client SDK and raw HTTP."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import letta_client
import pytest

from tests.e2e.conftest import System

pytestmark = pytest.mark.e2e


def lifecycle(system: System) -> dict[str, Any]:
    client = system.client()
    agent = client.agents.create(
        name="lifecycle",
        model="openai/gpt-4o-mini",
        memory_blocks=[
            {"label": "human", "value": "Name: Sam"},
            {"label": "persona", "value": "I am a careful assistant.", "limit": 500},
        ],
        tags=["e2e"],
    )
    # Read-your-writes: the acknowledged create is visible at once.
    fetched = client.agents.retrieve(agent.id)
    listed = [a.id for a in client.agents.list(tags=["e2e"])]
    renamed = client.agents.update(agent.id, name="renamed")
    human = client.agents.blocks.retrieve("human", agent_id=agent.id)
    edited = client.agents.blocks.update("human", agent_id=agent.id, value="Name: Sam Lee")
    shared = client.blocks.create(label="project", value="O backbone")
    attached = client.agents.blocks.attach(shared.id, agent_id=agent.id)
    detached = client.agents.blocks.detach(shared.id, agent_id=agent.id)
    client.agents.delete(agent.id)
    with pytest.raises(letta_client.NotFoundError):
        client.agents.retrieve(agent.id)
    # Blocks outlive the agent that used them.
    survivor = client.blocks.retrieve(human.id)
    return {
        "agent": agent,
        "fetched": fetched,
        "listed": listed,
        "renamed": renamed,
        "human": human,
        "edited": edited,
        "attached": attached,
        "detached": detached,
        "survivor": survivor,
        "shared": shared,
    }


async def test_agent_lifecycle_with_the_official_client(system: System) -> None:
    r = await asyncio.to_thread(lifecycle, system)
    agent = r["agent"]
    assert agent.id.startswith("agent-")
    assert agent.agent_type == "letta_v1_agent"
    assert agent.llm_config.model == "gpt-4o-mini" and agent.llm_config.context_window > 0
    assert [b.label for b in agent.memory.blocks] == ["human", "persona"]
    assert {t.name for t in agent.tools} == {
        "conversation_search",
        "memory_insert",
        "memory_replace",
    }
    assert r["fetched"].id == agent.id and r["fetched"].name == "lifecycle"
    assert agent.id in r["listed"]
    assert r["renamed"].name == "renamed"
    assert r["human"].value == "Name: Sam"
    assert r["edited"].value == "Name: Sam Lee"
    assert "project" in [b.label for b in r["attached"].blocks]
    assert "project" not in [b.label for b in r["detached"].blocks]
    assert r["survivor"].value == "Name: Sam Lee"


async def test_block_crud_and_limits(system: System) -> None:
    http = system.http
    created = await http.post("/v1/blocks/", json={"label": "notes", "value": "a", "limit": 5})
    assert created.status_code == 200, created.text
    block = created.json()
    assert (block["label"], block["value"], block["limit"]) == ("notes", "a", 5)
    too_long = await http.patch(f"/v1/blocks/{block['id']}", json={"value": "abcdefgh"})
    assert too_long.status_code == 422
    assert "limit" in too_long.json()["detail"]
    assert (await http.get(f"/v1/blocks/{block['id']}")).json()["value"] == "a"
    ok = await http.patch(f"/v1/blocks/{block['id']}", json={"value": "abc"})
    assert ok.json()["value"] == "abc"
    ids = [b["id"] for b in (await http.get("/v1/blocks", params={"label": "notes"})).json()]
    assert block["id"] in ids
    assert (await http.delete(f"/v1/blocks/{block['id']}")).status_code == 200
    assert (await http.get(f"/v1/blocks/{block['id']}")).status_code == 404


async def test_bad_input_is_a_clear_error_and_changes_nothing(system: System) -> None:
    http = system.http
    before = (await http.get("/v1/agents/count")).json()
    cases = [
        (
            await http.post(
                "/v1/agents/", content=b"{not json", headers={"content-type": "application/json"}
            ),
            422,
        ),
        (await http.post("/v1/agents/", json={"name": 5, "model": "openai/gpt-4o-mini"}), 422),
        (await http.post("/v1/agents/", json={"name": "x"}), 400),
        (await http.post("/v1/agents/", json={"model": "nohandle"}), 400),
        (await http.post("/v1/agents/", json={"model": "openai/m", "tools": ["rm_rf"]}), 400),
        (
            await http.post(
                "/v1/agents/",
                json={
                    "model": "openai/m",
                    "memory_blocks": [{"label": "h", "value": "xx", "limit": 1}],
                },
            ),
            422,
        ),
        (await http.get("/v1/agents/not-an-id"), 422),
        (await http.get("/v1/agents/agent-00000000-0000-4000-8000-000000000000"), 404),
        (
            await http.patch(
                "/v1/agents/agent-00000000-0000-4000-8000-000000000000", json={"name": "n"}
            ),
            404,
        ),
        (await http.get("/v1/blocks/block-nope"), 422),
        (
            await http.post(
                "/v1/agents/agent-00000000-0000-4000-8000-000000000000/messages",
                json={"messages": [{"role": "user", "content": "hi"}]},
            ),
            404,
        ),
        (await http.get("/v1/agents/", params={"limit": "many"}), 422),
    ]
    for response, status in cases:
        assert response.status_code == status, (response.request.url, response.text)
        assert "detail" in response.json()
    assert (await http.get("/v1/agents/count")).json() == before


async def test_requests_without_the_api_key_are_refused(system: System) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=system.base_url) as anon:
        assert (await anon.get("/v1/agents/")).status_code == 401
        assert (await anon.get("/v1/health/")).status_code == 200


def walk_pages(system: System, tag: str) -> tuple[list[str], list[str]]:
    client = system.client()
    created = [
        client.agents.create(name=f"page-{i}", model="openai/gpt-4o-mini", tags=[tag]).id
        for i in range(3)
    ]
    # The SDK auto-paginates with after=<last id> until a page comes back empty.
    walked = [a.id for a in client.agents.list(tags=[tag], limit=1, order="asc")]
    return created, walked


async def test_list_pagination_walks_every_agent_once(system: System) -> None:
    created, walked = await asyncio.to_thread(walk_pages, system, "pages-e2e")
    assert walked == created
    newest_first = (await system.http.get("/v1/agents/", params={"tags": "pages-e2e"})).json()
    assert [a["id"] for a in newest_first] == created[::-1]
    before = (
        await system.http.get(
            "/v1/agents/", params={"tags": "pages-e2e", "before": created[0], "order": "desc"}
        )
    ).json()
    assert [a["id"] for a in before] == created[:0:-1]


async def test_a_refused_agent_creation_leaves_no_block_behind(system: System) -> None:
    label = f"orphan-{uuid.uuid4().hex[:8]}"
    body = {
        "model": "openai/gpt-4o-mini",
        "memory_blocks": [{"label": label, "value": "v"}],
        "tool_rules": [{"type": "no_such_rule", "tool_name": "send_message"}],
    }
    refused = await system.http.post("/v1/agents/", json=body)
    assert refused.status_code == 422, refused.text
    blocks = (await system.http.get("/v1/blocks/", params={"label": label})).json()
    assert blocks == []
