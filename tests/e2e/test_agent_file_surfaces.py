"""Agent files with the surfaces Letta apps are built on, through the official SDK: an agent
with an attached folder holding a markdown file and an MCP server's tool, exported and
imported again; the copy has the folder, the file processed again to the same chunks, the
MCP tool (its server registered from the file when this server has no server of that name)
and answers. A retried import writes nothing twice; a bad file is refused whole."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import nats
import pytest

from o_contracts import subjects
from tests.e2e.conftest import System
from tests.e2e.folder_support import markdown, new_folder, processed, upload
from tests.e2e.support import event_types, send, stored
from tests.e2e.test_agent_files import import_file, log_end
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.servers import operator

pytest.importorskip("mcp", reason="the mcp package is not installed")

from tests.e2e.mcp_server import Served

pytestmark = pytest.mark.e2e

# Hash-based vectors from the fake OpenAI server.
FAKE_EMBEDDING = "openai/text-embedding-3-small"
DEADLINE = 90.0


async def chunks_of(system: System, folder_id: str) -> list[str]:
    response = await system.http.get(
        f"/v1/folders/{folder_id}/passages", params={"order": "asc", "limit": 1000}
    )
    assert response.status_code == 200, response.text
    return [p["text"] for p in response.json()]


async def only_file(system: System, folder_id: str) -> dict[str, Any]:
    response = await system.http.get(f"/v1/folders/{folder_id}/files")
    assert response.status_code == 200, response.text
    (file,) = response.json()
    return dict(file)


async def open_file_names(system: System, agent_id: str) -> list[str]:
    """The agent's open files, once it has one (a file processed after the import opens
    for the agents its folder was attached to), polled."""
    async with asyncio.timeout(DEADLINE):
        while True:
            response = await system.http.get(f"/v1/agents/{agent_id}/files")
            assert response.status_code == 200, response.text
            names = [f["file_name"] for f in response.json()["files"] if f["is_open"]]
            if names:
                return names
            await asyncio.sleep(0.05)


async def subjects_begun_after(system: System, start: int) -> list[str]:
    """The subjects of events appended after sequence `start` that had none before it."""
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    js = nc.jetstream()
    try:
        appended = {m.subject for m in await stored(nc, subjects.EVENTS_STREAM, start + 1)}
        begun = []
        for subject in sorted(appended):
            first = await js.get_msg(subjects.EVENTS_STREAM, seq=1, subject=subject, next=True)
            if int(first.seq or 0) > start:
                begun.append(subject)
        return begun
    finally:
        await nc.close()


async def types_on(system: System, subject: str) -> list[str]:
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        return [t for _, t in await event_types(nc, subject)]
    finally:
        await nc.close()


async def test_an_agent_with_a_folder_and_an_mcp_tool_exported_and_imported_keeps_both(
    system: System, llm: FakeOpenAI, mcp_server: Served
) -> None:
    client = system.client()
    token = f"tok-{uuid.uuid4().hex}"
    server_name = f"adder-{uuid.uuid4().hex[:8]}"
    server = await asyncio.to_thread(
        client.mcp_servers.create,
        server_name=server_name,
        config={
            "mcp_server_type": "streamable_http",
            "server_url": mcp_server.http_url,
            "auth_token": token,
        },
    )
    tools = await asyncio.to_thread(client.mcp_servers.tools.list, server.id)
    add = next(t for t in tools if t.name == "add")
    folder = await new_folder(system, embedding=FAKE_EMBEDDING, description="Team handbook")
    text = markdown(["onboarding", "holidays", "security"])
    up = await upload(system, folder["id"], "notes.md", text.encode(), "text/markdown")
    assert (await processed(system, folder["id"], up["id"]))["processing_status"] == "completed"
    original_chunks = await chunks_of(system, folder["id"])
    assert len(original_chunks) == 3
    agent = await asyncio.to_thread(
        client.agents.create,
        name="librarian",
        model="openai/gpt-4o-mini",
        memory_blocks=[{"label": "human", "value": "Name: Ada"}],
        tool_ids=[add.id],
    )
    await asyncio.to_thread(client.agents.folders.attach, folder["id"], agent_id=agent.id)
    llm.push(Reply(content="Hello, Ada."))
    await send(system, agent.id, "Hello")

    exported = await asyncio.to_thread(client.agents.export_file, agent.id)
    document = json.loads(exported)
    assert token not in exported  # never a server's credentials
    (source,) = document["sources"]
    assert (source["name"], source["description"]) == (folder["name"], "Team handbook")
    (file,) = document["files"]
    assert (file["source_id"], file["file_name"], file["content"]) == (
        source["id"],
        f"{folder['name']}/notes.md",
        text,
    )
    (entry,) = document["agents"]
    assert entry["source_ids"] == [source["id"]]
    assert [(f["file_id"], f["is_open"]) for f in entry["files_agents"]] == [(file["id"], True)]
    (exported_server,) = document["mcp_servers"]
    assert exported_server == {
        "server_type": "streamable_http",
        "server_name": server_name,
        "server_url": mcp_server.http_url,
        "stdio_config": None,
        "metadata_": None,
        "id": exported_server["id"],
    }

    # Into this server, which has the MCP server: the tool is that server's own.
    imported = await asyncio.to_thread(
        client.agents.import_file, file=("librarian.af", exported.encode())
    )
    (copy_id,) = imported.agent_ids
    copy = await asyncio.to_thread(client.agents.retrieve, copy_id)
    assert [t.id for t in copy.tools if t.tool_type == "external_mcp"] == [add.id]
    (copy_folder,) = await asyncio.to_thread(lambda: list(client.agents.folders.list(copy_id)))
    # The original's name is taken: a suffix, as Letta gives one.
    assert copy_folder.name.startswith(f"{folder['name']}_") and copy_folder.id != folder["id"]
    assert copy_folder.embedding_config.handle == FAKE_EMBEDDING
    copied = await only_file(system, copy_folder.id)
    done = await processed(system, copy_folder.id, copied["id"])
    assert (done["processing_status"], done["file_name"]) == ("completed", "notes.md")
    assert await chunks_of(system, copy_folder.id) == original_chunks
    assert await open_file_names(system, copy_id) == [f"{copy_folder.name}/notes.md"]

    # Into a server without that MCP server: registered from the file, without the
    # token, with the tools the file lists; the copy calls it in its loop.
    await asyncio.to_thread(client.mcp_servers.delete, server.id)
    key = {"Idempotency-Key": f"surfaces-{uuid.uuid4().hex}"}
    response = await import_file(system, exported.encode(), key, append_copy_suffix=False)
    assert response.status_code == 200, response.text
    (second_id,) = response.json()["agent_ids"]
    assert any(server_name in n and "without a token" in n for n in response.json()["left_out"])
    registered = [s for s in client.mcp_servers.list() if s.server_name == server_name]
    (new_server,) = registered
    assert new_server.id != server.id
    assert (new_server.server_url, new_server.auth_token) == (mcp_server.http_url, None)
    listed = await asyncio.to_thread(client.mcp_servers.tools.list, new_server.id)
    assert [t.name for t in listed] == ["add"]
    second = await asyncio.to_thread(client.agents.retrieve, second_id)
    assert second.name == "librarian"
    assert [t.id for t in second.tools if t.tool_type == "external_mcp"] == [listed[0].id]
    (second_folder,) = await asyncio.to_thread(lambda: list(client.agents.folders.list(second_id)))
    second_file = await only_file(system, second_folder.id)
    await processed(system, second_folder.id, second_file["id"])
    assert await chunks_of(system, second_folder.id) == original_chunks
    assert await open_file_names(system, second_id) == [f"{second_folder.name}/notes.md"]

    llm.push(Reply(tool_calls=[("add", {"a": 2, "b": 40})]), Reply(content="It is 42."))
    result = await send(system, second_id, "What is 2 + 40?")
    returns = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
    assert [(r["status"], r["tool_return"]) for r in returns] == [("success", "42")]
    assert result["messages"][-1]["content"] == "It is 42."
    prompt = llm.requests[-2]["messages"][0]["content"]
    assert f'<file status="open" name="{second_folder.name}/notes.md">' in prompt
    assert "add" in {t["function"]["name"] for t in llm.requests[-2]["tools"]}

    # The same import again (same key): the same agent, nothing written twice.
    again = await import_file(system, exported.encode(), key, append_copy_suffix=False)
    assert again.status_code == 200, again.text
    assert again.json()["agent_ids"] == [second_id]
    assert [s.id for s in client.mcp_servers.list() if s.server_name == server_name] == [
        new_server.id
    ]
    assert await types_on(system, subjects.folder_subject(second_folder.id)) == [
        "FolderCreated",
        "FileUploaded",
    ]
    assert await types_on(system, subjects.mcp_server_subject(new_server.id)) == [
        "McpServerCreated",
        "McpServerToolsSynced",
    ]
    agent_types = await types_on(system, subjects.agent_subject(second_id))
    assert agent_types[:3] == ["AgentCreated", "MessagesImported", "FolderAttached"]
    assert agent_types.count("MessagesImported") == agent_types.count("FolderAttached") == 1


async def test_files_with_bad_folders_or_servers_are_refused_whole(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await asyncio.to_thread(system.client().agents.create, model="openai/gpt-4o-mini")
    document = json.loads(await asyncio.to_thread(system.client().agents.export_file, agent.id))
    document["sources"] = [
        {"id": "source-0", "name": f"docs-{uuid.uuid4().hex[:8]}", "embedding": FAKE_EMBEDDING}
    ]
    document["files"] = [
        {"id": "file-0", "source_id": "source-0", "original_file_name": "a.md", "content": "A."}
    ]
    document["agents"][0]["source_ids"] = ["source-0"]

    def changed(change: Any) -> bytes:
        copy = json.loads(json.dumps(document))
        change(copy)
        return json.dumps(copy).encode()

    server = {"id": "mcp_server-0", "server_name": "s", "server_type": "stdio"}
    cases = [
        (changed(lambda d: d["files"][0].update(source_id="source-9")), "source-9"),
        (changed(lambda d: d["agents"][0].update(source_ids=["source-4"])), "source-4"),
        (changed(lambda d: d["mcp_servers"].append({**server, "server_type": "ws"})), "ws"),
        (changed(lambda d: d["mcp_servers"].append({**server, "stdio_config": {}})), "command"),
        (changed(lambda d: d.update(skills=[{"name": "x"}])), "SKILL.md"),
    ]
    start = await log_end(system)
    for data, detail in cases:
        response = await import_file(system, data)
        assert response.status_code == 422, (detail, response.text)
        assert detail in json.dumps(response.json()["detail"]), response.text
    # Nothing of them is in the log: no folder, file, server, tool, block or agent (each would
    # be a subject new since `start`; work of earlier tests may still append to older ones).
    assert await subjects_begun_after(system, start) == []
    good = await import_file(system, changed(lambda d: None))
    assert good.status_code == 200, good.text
