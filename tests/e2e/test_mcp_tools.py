"""MCP servers' tools through the official SDK, against a real MCP server written with
the `mcp` SDK: listed when the server is created (streamable HTTP and SSE), read, run,
refreshed when the server changes; a server that is down gives a tool error."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from letta_client import NotFoundError

from tests.e2e.conftest import System
from tests.e2e.support import agent_events, new_agent, send, unique
from tests.e2e.test_durable_runs import DEADLINE, finished, kill_executors, send_later
from tests.fakes.openai_server import FakeOpenAI, Reply

pytest.importorskip("mcp", reason="the mcp package is not installed")

from tests.e2e.mcp_server import Served, fail

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("kind", ["streamable_http", "sse"])
async def test_a_servers_tools_are_listed_read_and_run(
    system: System, mcp_server: Served, kind: str
) -> None:
    client = system.client()
    url = mcp_server.http_url if kind == "streamable_http" else mcp_server.sse_url
    token = f"tok-{uuid.uuid4().hex}"
    server = client.mcp_servers.create(
        server_name=unique(kind),
        config={
            "mcp_server_type": kind,  # type: ignore[typeddict-item]
            "server_url": url,
            "auth_header": "X-API-Key",
            "auth_token": token,
            "custom_headers": {"X-Team": "o"},
        },
    )
    tools = client.mcp_servers.tools.list(server.id)
    assert [t.name for t in tools][:3] == ["echo", "add", "fail"]
    add = tools[1]
    assert add.id is not None and add.id.startswith("tool-")
    assert add.tool_type == "external_mcp" and add.tags == [f"mcp:{server.server_name}"]
    assert add.json_schema == {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"title": "A", "type": "integer"},
                "b": {"title": "B", "type": "integer"},
            },
            "required": ["a", "b"],
        },
    }
    # The server got the token under the header it was given, and the custom header.
    assert any(h.get("x-api-key") == token and h.get("x-team") == "o" for h in mcp_server.headers)
    assert client.mcp_servers.tools.retrieve(add.id, mcp_server_id=server.id) == add

    result = client.mcp_servers.tools.run(add.id, mcp_server_id=server.id, args={"a": 2, "b": 40})
    assert (result.status, result.func_return) == ("success", "42")
    failed = client.mcp_servers.tools.run(
        tools[2].id,  # type: ignore[arg-type]
        mcp_server_id=server.id,
        args={"reason": "no such city"},
    )
    assert failed.status == "error" and "no such city" in str(failed.func_return)

    # A tool of another server is not this one's.
    other = client.mcp_servers.create(
        server_name=unique("other"),
        config={"mcp_server_type": "streamable_http", "server_url": "http://127.0.0.1:9/mcp"},
    )
    with pytest.raises(NotFoundError):
        client.mcp_servers.tools.retrieve(add.id, mcp_server_id=other.id)
    with pytest.raises(NotFoundError):
        client.mcp_servers.tools.run(add.id, mcp_server_id=other.id, args={})
    client.mcp_servers.delete(other.id)
    client.mcp_servers.delete(server.id)
    with pytest.raises(NotFoundError):
        client.mcp_servers.tools.list(server.id)


async def test_refresh_follows_the_server_and_keeps_tool_ids(
    system: System, mcp_server: Served
) -> None:
    client = system.client()
    server = client.mcp_servers.create(
        server_name=unique("refresh"),
        config={"mcp_server_type": "streamable_http", "server_url": mcp_server.http_url},
    )
    before = {t.name: t.id for t in client.mcp_servers.tools.list(server.id)}

    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    mcp_server.mcp.add_tool(shout)
    mcp_server.mcp.remove_tool("fail")
    try:
        assert client.mcp_servers.refresh(server.id) == {
            "deleted": ["fail"],
            "updated": [],
            "added": ["shout"],
        }
    finally:
        mcp_server.mcp.remove_tool("shout")
        mcp_server.mcp.add_tool(fail)
    after = {t.name: t.id for t in client.mcp_servers.tools.list(server.id)}
    assert set(after) == {"echo", "add", "hold", "shout"}
    assert after["echo"] == before["echo"] and after["add"] == before["add"]
    client.mcp_servers.delete(server.id)


async def test_a_server_that_is_down_gives_a_tool_error_and_refresh_says_why(
    system: System, mcp_server: Served
) -> None:
    client = system.client()
    server = client.mcp_servers.create(
        server_name=unique("down"),
        config={"mcp_server_type": "streamable_http", "server_url": mcp_server.http_url},
    )
    (echo,) = [t for t in client.mcp_servers.tools.list(server.id) if t.name == "echo"]
    client.mcp_servers.update(
        server.id,
        config={"mcp_server_type": "streamable_http", "server_url": "http://127.0.0.1:9/mcp"},
    )
    result = client.mcp_servers.tools.run(echo.id, mcp_server_id=server.id, args={"message": "hi"})  # type: ignore[arg-type]
    assert result.status == "error" and "could not be called" in str(result.func_return)
    response = await system.http.patch(f"/v1/mcp-servers/{server.id}/refresh")
    assert response.status_code == 404
    assert response.json()["detail"]["code"] == "MCPServerUnavailable"
    # What was recorded stays until the server answers again.
    assert {t.name for t in client.mcp_servers.tools.list(server.id)} == {
        "echo",
        "add",
        "fail",
        "hold",
    }
    client.mcp_servers.delete(server.id)


async def test_an_agent_calls_an_mcp_tool_in_its_loop(
    system: System, mcp_server: Served, llm: FakeOpenAI
) -> None:
    client = system.client()
    token = f"tok-{uuid.uuid4().hex}"
    server = client.mcp_servers.create(
        server_name=unique("agent"),
        config={
            "mcp_server_type": "streamable_http",
            "server_url": mcp_server.http_url,
            "auth_token": token,
        },
    )
    by_name = {t.name: t for t in client.mcp_servers.tools.list(server.id)}
    agent = await new_agent(system, tool_ids=[by_name["add"].id])
    listed = {t["name"]: t for t in agent["tools"]}
    assert listed["add"]["tool_type"] == "external_mcp"
    attached = await system.http.patch(
        f"/v1/agents/{agent['id']}/tools/attach/{by_name['fail'].id}"
    )
    assert attached.status_code == 200
    listed_all = (await system.http.get("/v1/tools/", params={"name": "add", "limit": 1000})).json()
    assert by_name["add"].id in {t["id"] for t in listed_all}
    assert client.tools.retrieve(by_name["add"].id).tool_type == "external_mcp"  # type: ignore[arg-type]

    llm.push(
        Reply(tool_calls=[("add", {"a": 2, "b": 40})]),
        Reply(tool_calls=[("fail", {"reason": "no such city"})]),
        Reply(content="Done."),
    )
    async with agent_events(system, agent["id"]) as events:
        result = await send(system, agent["id"], "Add 2 and 40, then fail.")
        recorded = await events.drain()
    returns = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
    assert [(r["status"], r["tool_return"]) for r in returns] == [
        ("success", "42"),
        ("error", "Error executing tool fail: no such city"),  # the server's own words
    ]
    assert result["stop_reason"]["stop_reason"] == "end_turn"
    # The model was offered the server's schema; the server got the token.
    offered = {t["function"]["name"]: t["function"] for t in llm.requests[-3]["tools"]}
    assert offered["add"]["parameters"]["required"] == ["a", "b"]
    assert any(h.get("authorization") == token for h in mcp_server.headers)
    # Recorded like any tool call: requested before, its result after; the token nowhere.
    kinds = [e.type for e in recorded if e.type in ("ToolCallRequested", "ToolReturned")]
    assert kinds == ["ToolCallRequested", "ToolReturned"] * 2
    assert token not in str([e.data for e in recorded])

    # A server that is down is the tool's error; the run goes on.
    client.mcp_servers.update(
        server.id,
        config={"mcp_server_type": "streamable_http", "server_url": "http://127.0.0.1:9/mcp"},
    )
    llm.push(Reply(tool_calls=[("add", {"a": 1, "b": 1})]), Reply(content="It is down."))
    result = await send(system, agent["id"], "Add 1 and 1.")
    (ret,) = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
    assert ret["status"] == "error" and "could not be called" in ret["tool_return"]
    assert result["messages"][-1]["content"] == "It is down."
    client.mcp_servers.delete(server.id)


async def test_an_mcp_call_cut_off_by_a_dying_executor_is_not_made_again(
    system: System, mcp_server: Served, llm: FakeOpenAI
) -> None:
    client = system.client()
    server = client.mcp_servers.create(
        server_name=unique("held"),
        config={"mcp_server_type": "streamable_http", "server_url": mcp_server.http_url},
    )
    (hold,) = [t for t in client.mcp_servers.tools.list(server.id) if t.name == "hold"]
    agent = await new_agent(system, tool_ids=[hold.id])
    gate = mcp_server.gate
    llm.push(Reply(tool_calls=[("hold", {"tag": "once"})]), Reply(content="Unknown, then."))
    try:
        async with agent_events(system, agent["id"]) as events:
            task = send_later(system, agent["id"], "Hold it.")
            # The server has the call in hand when the executors die.
            assert await asyncio.to_thread(gate.entered.wait, DEADLINE)
            await kill_executors(system)
            result = await finished(task)
            recorded = await events.drain()
    finally:
        gate.release.set()
    (ret,) = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
    assert ret["status"] == "error" and "outcome is unknown" in ret["tool_return"]
    assert result["messages"][-1]["content"] == "Unknown, then."
    assert gate.calls == 1
    counts = {t: sum(e.type == t for e in recorded) for t in ("ToolCallRequested", "ToolReturned")}
    assert counts == {"ToolCallRequested": 1, "ToolReturned": 1}
    client.mcp_servers.delete(server.id)


async def test_letta_older_routes_act_on_the_same_servers_by_name(
    system: System, mcp_server: Served
) -> None:
    http = system.http
    base = "/v1/tools/mcp/servers"
    name = unique("legacy")
    config = {"server_name": name, "type": "streamable_http", "server_url": mcp_server.http_url}
    added = await http.put(base, json=config)
    assert added.status_code == 200, added.text
    assert {
        **config,
        "auth_header": None,
        "auth_token": None,
        "custom_headers": None,
    } in added.json()
    assert (await http.get(base)).json()[name]["server_url"] == mcp_server.http_url
    # The same server under /v1/mcp-servers/, and its tools under the same ids.
    (server,) = [s for s in system.client().mcp_servers.list() if s.server_name == name]

    live = (await http.get(f"{base}/{name}/tools")).json()
    assert {t["name"] for t in live} >= {"echo", "add"}
    assert next(t for t in live if t["name"] == "add")["inputSchema"]["required"] == ["a", "b"]
    ran = await http.post(f"{base}/{name}/tools/add/execute", json={"args": {"a": 1, "b": 2}})
    assert ran.json() == {"result": "3", "success": True}
    tool = (await http.post(f"{base}/{name}/add")).json()
    assert tool["id"] in {t.id for t in system.client().mcp_servers.tools.list(server.id)}
    missing = await http.post(f"{base}/{name}/no_such_tool")
    assert missing.status_code == 400 and "no_such_tool" in missing.json()["detail"]
    resynced = (await http.post(f"{base}/{name}/resync")).json()
    assert resynced == {"deleted": [], "updated": [], "added": []}

    patched = await http.patch(f"{base}/{name}", json={"server_url": "http://127.0.0.1:9/mcp"})
    assert patched.status_code == 200 and patched.json()["server_url"].endswith(":9/mcp")
    down = await http.get(f"{base}/{name}/tools")
    assert down.status_code == 502 and "could not be reached" in down.json()["detail"]
    left = await http.delete(f"{base}/{name}")
    assert left.status_code == 200 and name not in {c["server_name"] for c in left.json()}
    assert (await http.get(f"{base}/{name}/tools")).status_code == 404
