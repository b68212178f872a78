"""Block versions (an O extension), restores, duplicate labels and memory_apply_patch."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import System
from tests.e2e.support import new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


async def versions(system: System, block_id: str) -> list[dict[str, Any]]:
    response = await system.http.get(f"/v1/blocks/{block_id}/versions")
    assert response.status_code == 200, response.text
    return list(response.json())


async def test_every_change_is_a_version_and_a_restore_is_a_new_one(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system, agent_type="memgpt_v2_agent")
    human = next(b for b in agent["blocks"] if b["label"] == "human")
    bid = human["id"]
    patched = await system.http.patch(f"/v1/blocks/{bid}", json={"value": "Name: Sam Lee"})
    assert patched.status_code == 200
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})]),
        Reply(tool_calls=[("send_message", {"message": "ok"})]),
    )
    await send(system, agent["id"], "I like tea")
    history = await versions(system, bid)
    assert [(v["version"], v["value"], v["actor"]) for v in history] == [
        (1, "Name: Sam", "api"),
        (2, "Name: Sam Lee", "api"),
        (3, "Name: Sam Lee\nLikes: tea", "agent"),
    ]
    assert history[2]["tool_name"] == "memory_insert"
    assert history[2]["agent_id"] == agent["id"]

    restored = await system.http.post(f"/v1/blocks/{bid}/versions/1/restore")
    assert restored.status_code == 200, restored.text
    assert restored.json()["value"] == "Name: Sam"
    latest = (await versions(system, bid))[-1]
    assert (latest["version"], latest["value"], latest["restored_from"]) == (4, "Name: Sam", 1)
    # The agent sees the restored value in its next prompt.
    llm.push(Reply(tool_calls=[("send_message", {"message": "hi"})]))
    await send(system, agent["id"], "hello")
    assert "Likes: tea" not in llm.requests[-1]["messages"][0]["content"]

    missing = await system.http.post(f"/v1/blocks/{bid}/versions/9/restore")
    assert missing.status_code == 404 and "no version 9" in missing.json()["detail"]
    assert (await system.http.post(f"/v1/blocks/{bid}/versions/0/restore")).status_code == 422
    unknown = "block-00000000-0000-4000-8000-000000000000"
    assert (await system.http.get(f"/v1/blocks/{unknown}/versions")).status_code == 404
    assert len(await versions(system, bid)) == 4


async def test_a_label_stays_unique_on_every_agent_sharing_the_block(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    persona = next(b for b in agent["blocks"] if b["label"] == "persona")
    clash = await system.http.patch(f"/v1/blocks/{persona['id']}", json={"label": "human"})
    assert clash.status_code == 409 and "already has a block labelled 'human'" in clash.text
    via_agent = await system.http.patch(
        f"/v1/agents/{agent['id']}/core-memory/blocks/persona", json={"label": "human"}
    )
    assert via_agent.status_code == 409
    after = (await system.http.get(f"/v1/agents/{agent['id']}/core-memory/blocks")).json()
    assert sorted(b["label"] for b in after) == ["human", "persona"]
    assert len(await versions(system, persona["id"])) == 1
    other = (await system.http.post("/v1/blocks/", json={"label": "human", "value": "x"})).json()
    twice = await system.http.patch(
        f"/v1/agents/{agent['id']}",
        json={"block_ids": [b["id"] for b in agent["blocks"]] + [other["id"]]},
    )
    assert twice.status_code == 409 and "two blocks labelled 'human'" in twice.text
    renamed = await system.http.patch(f"/v1/blocks/{persona['id']}", json={"label": "self"})
    assert renamed.status_code == 200 and renamed.json()["label"] == "self"


async def test_memory_apply_patch_tool(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system, tools=["memory_apply_patch"])
    good = "@@\n Name: Sam\n+Likes: tea"
    bad = "@@\n-Name: Alex\n+Name: Bob"
    llm.push(
        Reply(tool_calls=[("memory_apply_patch", {"label": "human", "patch": good})]),
        Reply(tool_calls=[("memory_apply_patch", {"label": "human", "patch": bad})]),
        Reply(content="done"),
    )
    result = await send(system, agent["id"], "remember I like tea")
    returns = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
    assert returns[0]["status"] == "success"
    assert returns[1]["status"] == "error" and "not found" in returns[1]["tool_return"]
    block = (await system.http.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human")).json()
    assert block["value"] == "Name: Sam\nLikes: tea"


async def test_conversation_search_finds_old_messages_by_role_and_date(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="Noted, the gate code is 4417."))
    await send(system, agent["id"], "The gate code is 4417")
    llm.push(
        Reply(tool_calls=[("conversation_search", {"query": "gate code", "roles": ["user"]})]),
        Reply(tool_calls=[("conversation_search", {"query": "gate", "end_date": "2000-01-01"})]),
        Reply(tool_calls=[("conversation_search", {"query": "gate", "start_date": "soon"})]),
        Reply(tool_calls=[("conversation_search", {"query": "gate", "roles": ["robot"]})]),
        Reply(content="found it"),
    )
    result = await send(system, agent["id"], "what was the gate code?")
    returns = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
    assert returns[0]["status"] == "success"
    assert '"The gate code is 4417"' in returns[0]["tool_return"]
    assert "Noted" not in returns[0]["tool_return"]  # the assistant's reply is filtered out
    assert returns[1]["tool_return"] == "No results found."
    assert returns[2]["status"] == "error" and "start_date" in returns[2]["tool_return"]
    assert returns[3]["status"] == "error" and "roles" in returns[3]["tool_return"]
