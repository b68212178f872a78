"""stdio MCP servers, run by the tool sandbox confined like user tools, against a real MCP
server written with the `mcp` SDK (mcp_stdio_server.py): listed when created, run from
the API, from Letta's older routes and from an agent's loop; what the confinement lets
the server do, asked from the server itself; a server that crashes, hangs, answers
garbage or never starts gives the tool error with the reason, and the run goes on."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import nats
import nats.errors
import pytest
from letta_client import Letta

from o_contracts import subjects
from o_contracts.mcp_stdio import McpStdioRequest
from o_contracts.requests import TAKEN_BY
from o_runtime.nats_identity import inbox_prefix
from tests.e2e.conftest import ROOT, System
from tests.e2e.mcp_stdio_python import server_python
from tests.e2e.support import DEADLINE, agent_events, new_agent, send, unique
from tests.e2e.test_durable_runs import finished, kill_executors, send_later
from tests.e2e.test_schedules import kill
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.servers import operator

mcp = pytest.importorskip("mcp", reason="the mcp package is not installed")

pytestmark = pytest.mark.e2e

SERVER = Path(__file__).with_name("mcp_stdio_server.py")
TOOLS = [
    *("echo", "add", "whisper", "whoami", "reach", "write_file", "read_file"),
    *("crash", "hang", "freeze"),
]
# O_MCP_STDIO_CALL_SECONDS in tests/e2e/conftest.py
CALL_SECONDS = 4


def config(*flags: str, **env: str) -> dict[str, Any]:
    # The interpreter any uid can run, and the `mcp` SDK for it (mcp_stdio_python.py).
    python, pythonpath = server_python()
    return {
        "mcp_server_type": "stdio",
        "command": python,
        "args": [str(SERVER), *flags],
        "env": {"PYTHONPATH": pythonpath, **env},
    }


def create(client: Letta, *flags: str, **env: str) -> Any:
    return client.mcp_servers.create(
        server_name=unique("stdio"),
        config=config(*flags, **env),  # type: ignore[arg-type]
    )


def tool_ids(client: Letta, server_id: str) -> dict[str, str]:
    return {t.name: str(t.id) for t in client.mcp_servers.tools.list(server_id)}


def run(client: Letta, server_id: str, tool_id: str, **args: Any) -> tuple[str, str]:
    result = client.mcp_servers.tools.run(tool_id, mcp_server_id=server_id, args=args)
    return str(result.status), str(result.func_return)


def tool_returns(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (m["status"], m["tool_return"])
        for m in result["messages"]
        if m["message_type"] == "tool_return_message"
    ]


async def test_a_stdio_servers_tools_are_listed_when_created_and_run(system: System) -> None:
    client = system.client()
    word = f"word-{uuid.uuid4().hex}"
    server = create(client, SECRET_WORD=word)
    tools = client.mcp_servers.tools.list(server.id)
    assert [t.name for t in tools] == TOOLS
    add = tools[1]
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
    ids = {t.name: str(t.id) for t in tools}
    assert run(client, server.id, ids["add"], a=2, b=40) == ("success", "42")
    # Its environment was decrypted in the sandbox and given to it.
    assert run(client, server.id, ids["whisper"]) == ("success", word)
    assert client.mcp_servers.refresh(server.id) == {"deleted": [], "updated": [], "added": []}
    client.mcp_servers.delete(server.id)


async def test_the_server_runs_confined_like_a_user_tool(system: System) -> None:
    client = system.client()
    server = create(client, SECRET_WORD="w")
    ids = tool_ids(client, server.id)

    status, said = run(client, server.id, ids["whoami"])
    assert status == "success"
    me = json.loads(said)
    # A scratch folder of its own; only its own environment (no NATS_URL, no keys).
    scratch = Path(me["cwd"])
    assert scratch.parent.name.startswith("o-sandbox-")
    assert scratch.parent.parent == Path(tempfile.gettempdir())
    assert me["env"] == ["HOME", "LANG", "PATH", "PYTHONPATH", "SECRET_WORD", "TMPDIR"]
    if os.geteuid() == 0:
        # Its own uid, and PID 2 of its own PID namespace (after the sandbox's init).
        assert me["uid"] >= 61000 and me["pid"] == 2

    # No network: not even the gateway, which listens on this host.
    gateway = urlparse(system.base_url)
    status, said = run(client, server.id, ids["reach"], host=gateway.hostname, port=gateway.port)
    assert status == "success" and said.startswith("blocked: PermissionError"), said

    # It writes only in its scratch folder: not in /tmp, which anyone may write to.
    escape = Path(tempfile.gettempdir()) / f"o-mcp-escape-{uuid.uuid4().hex}"
    status, said = run(client, server.id, ids["write_file"], path=str(escape))
    assert said.startswith("blocked: PermissionError") and not escape.exists()
    assert run(client, server.id, ids["write_file"], path="inside.txt") == ("success", "written")
    assert (scratch / "inside.txt").read_text() == "written by an MCP server"

    # It reads its own files, not O's (this checkout's files are readable by anyone).
    status, said = run(client, server.id, ids["read_file"], path=str(SERVER))
    assert said.startswith('"""A small MCP server')
    status, said = run(client, server.id, ids["read_file"], path=str(ROOT / "pyproject.toml"))
    assert said.startswith("blocked: PermissionError"), said
    client.mcp_servers.delete(server.id)


async def test_an_agent_calls_a_stdio_tool_in_its_loop(system: System, llm: FakeOpenAI) -> None:
    client = system.client()
    word = f"word-{uuid.uuid4().hex}"
    server = create(client, SECRET_WORD=word)
    ids = tool_ids(client, server.id)
    agent = await new_agent(system, tool_ids=[ids["add"], ids["echo"]])
    assert {t["name"]: t["tool_type"] for t in agent["tools"]}["add"] == "external_mcp"

    llm.push(
        Reply(tool_calls=[("add", {"a": 2, "b": 40})]),
        Reply(tool_calls=[("echo", {"message": "hello"})]),
        Reply(content="Done."),
    )
    async with agent_events(system, agent["id"]) as events:
        result = await send(system, agent["id"], "Add 2 and 40, then say hello.")
        recorded = await events.drain()
    assert tool_returns(result) == [("success", "42"), ("success", "hello")]
    assert result["stop_reason"]["stop_reason"] == "end_turn"
    offered = {t["function"]["name"]: t["function"] for t in llm.requests[-3]["tools"]}
    assert offered["add"]["parameters"]["required"] == ["a", "b"]
    # Recorded like any tool call; the server's environment nowhere in the agent's log.
    kinds = [e.type for e in recorded if e.type in ("ToolCallRequested", "ToolReturned")]
    assert kinds == ["ToolCallRequested", "ToolReturned"] * 2
    assert word not in str([e.data for e in recorded])
    client.mcp_servers.delete(server.id)


async def test_a_crash_is_the_tools_error_and_the_server_starts_again(
    system: System, llm: FakeOpenAI
) -> None:
    client = system.client()
    server = create(client)
    ids = tool_ids(client, server.id)
    agent = await new_agent(system, tool_ids=[ids["crash"], ids["echo"]])
    llm.push(
        Reply(tool_calls=[("crash", {})]),
        Reply(tool_calls=[("echo", {"message": "still here"})]),
        Reply(content="Recovered."),
    )
    result = await send(system, agent["id"], "Crash, then echo.")
    (crashed, echoed) = tool_returns(result)
    assert crashed[0] == "error"
    assert "the MCP server exited" in crashed[1] and "crashing on purpose" in crashed[1]
    assert echoed == ("success", "still here")
    assert result["messages"][-1]["content"] == "Recovered."
    client.mcp_servers.delete(server.id)


async def test_a_hanging_call_times_out_and_the_run_completes(
    system: System, llm: FakeOpenAI
) -> None:
    client = system.client()
    server = create(client)
    ids = tool_ids(client, server.id)
    agent = await new_agent(system, tool_ids=[ids["hang"]])
    llm.push(Reply(tool_calls=[("hang", {})]), Reply(content="Gave up."))
    result = await send(system, agent["id"], "Hang.")
    (hung,) = tool_returns(result)
    assert hung == (
        "error",
        f"MCP server could not be called: no answer within {CALL_SECONDS} s",
    )
    assert result["messages"][-1]["content"] == "Gave up."
    # The server still answers (a slow call is not a dead server).
    assert run(client, server.id, ids["echo"], message="hi") == ("success", "hi")
    client.mcp_servers.delete(server.id)


async def test_garbage_and_servers_that_never_start_are_refused_with_the_reason(
    system: System,
) -> None:
    client, http = system.client(), system.http

    async def refresh_error(server_id: str) -> str:
        response = await http.patch(f"/v1/mcp-servers/{server_id}/refresh")
        assert response.status_code == 404, response.text
        detail = response.json()["detail"]
        assert detail["code"] == "MCPServerUnavailable"
        return str(detail["error"])

    # Lists its tools in a shape that is not MCP's: created, with no tools.
    garbage = create(client, "--garbage")
    assert client.mcp_servers.tools.list(garbage.id) == []
    assert "ValidationError" in await refresh_error(garbage.id)
    # Writes a line that is not JSON-RPC where a tool's answer should be.
    ran = await http.post(
        f"/v1/tools/mcp/servers/{garbage.server_name}/tools/anything/execute", json={"args": {}}
    )
    assert ran.status_code == 502
    assert f"no answer within {CALL_SECONDS} s; it wrote a line that is not MCP" in str(
        ran.json()["detail"]
    )

    never = create(client, "--crash-at-start")
    assert "refusing to start" in await refresh_error(never.id)

    missing = client.mcp_servers.create(
        server_name=unique("missing"),
        config={"mcp_server_type": "stdio", "command": "no-such-mcp-server", "args": []},
    )
    assert "command not found: no-such-mcp-server" in await refresh_error(missing.id)
    for server in (garbage, never, missing):
        client.mcp_servers.delete(server.id)


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid of its own only when the sandbox is root")
async def test_a_server_behind_a_folder_closed_to_other_users_is_told_why(
    system: System,
) -> None:
    """As a server installed in root's home: run as a uid of its own, it cannot open its
    script, and the reason says which folder and why, not only "Permission denied"."""
    closed = Path(tempfile.mkdtemp(prefix="o-closed-"))  # mode 0700, as /root
    try:
        script = closed / "server.py"
        script.write_text(SERVER.read_text())
        client = system.client()
        server = client.mcp_servers.create(
            server_name=unique("closed"),
            config={**config(), "args": [str(script)]},  # type: ignore[arg-type]
        )
        response = await system.http.patch(f"/v1/mcp-servers/{server.id}/refresh")
        assert response.status_code == 404, response.text
        reason = str(response.json()["detail"]["error"])
        assert "Permission denied" in reason
        assert (
            "likely why: the server runs as uid" in reason
            and f"cannot reach a path its arguments name, {script}: {closed} is not open to"
            " other users (mode 700)"
            in reason
        ), reason
        client.mcp_servers.delete(server.id)
    finally:
        shutil.rmtree(closed)


async def test_a_changed_environment_restarts_the_server(system: System) -> None:
    client = system.client()
    server = create(client, SECRET_WORD="before")
    whisper = tool_ids(client, server.id)["whisper"]
    assert run(client, server.id, whisper) == ("success", "before")
    client.mcp_servers.update(server.id, config=config(SECRET_WORD="after"))  # type: ignore[arg-type]
    assert run(client, server.id, whisper) == ("success", "after")
    client.mcp_servers.delete(server.id)


async def test_letta_older_routes_reach_stdio_servers(system: System) -> None:
    http = system.http
    base = "/v1/tools/mcp/servers"
    name = unique("legacy")
    stdio = {k: v for k, v in config().items() if k != "mcp_server_type"}
    added = await http.put(base, json={"server_name": name, **stdio})
    assert added.status_code == 200, added.text
    assert (await http.get(base)).json()[name]["type"] == "stdio"
    live = (await http.get(f"{base}/{name}/tools")).json()
    assert [t["name"] for t in live] == TOOLS
    ran = await http.post(f"{base}/{name}/tools/add/execute", json={"args": {"a": 1, "b": 2}})
    assert ran.json() == {"result": "3", "success": True}
    assert (await http.delete(f"{base}/{name}")).status_code == 200


async def hanging(system: System, llm: FakeOpenAI, answer: str) -> tuple[Letta, Any, Any]:
    """A stdio server, and an agent that calls its `hang` tool, then answers `answer`."""
    client = system.client()
    server = create(client)
    agent = await new_agent(system, tool_ids=[tool_ids(client, server.id)["hang"]])
    llm.push(Reply(tool_calls=[("hang", {})]), Reply(content=answer))
    return client, server, agent


async def the_rest(sub: Any) -> list[Any]:
    """What else `sub` gets until half a second passes without a message."""
    rest = []
    while True:
        try:
            rest.append(await sub.next_msg(timeout=0.5))
        except nats.errors.TimeoutError:
            return rest


async def test_a_stdio_call_cut_off_by_a_dying_executor_is_not_made_again(
    system: System, llm: FakeOpenAI
) -> None:
    client, server, agent = await hanging(system, llm, "Unknown, then.")
    # Every request to stdio servers, as the sandbox gets it.
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        requests = await nc.subscribe(subjects.SANDBOX_MCP_STDIO)
        async with agent_events(system, agent["id"]) as events:
            task = send_later(system, agent["id"], "Hang.")
            # The call is on its way to the server when the executors die.
            asked = McpStdioRequest.decode((await requests.next_msg(timeout=DEADLINE)).data)
            assert (asked.operation, asked.tool_name) == ("call_tool", "hang")
            await kill_executors(system)
            result = await finished(task)
            recorded = await events.drain()
        again = await the_rest(requests)
    finally:
        await nc.close()
    assert again == []
    (ret,) = tool_returns(result)
    assert ret[0] == "error" and "outcome is unknown" in ret[1]
    assert result["messages"][-1]["content"] == "Unknown, then."
    counts = {t: sum(e.type == t for e in recorded) for t in ("ToolCallRequested", "ToolReturned")}
    assert counts == {"ToolCallRequested": 1, "ToolReturned": 1}
    client.mcp_servers.delete(server.id)


async def test_a_stdio_call_whose_sandbox_dies_fails_at_once_and_is_not_made_again(
    system: System, llm: FakeOpenAI
) -> None:
    # The caller watches the sandbox replica that took the call (o_runtime/watched_requests.py):
    # its death ends the call at once with the reason. Not asked again: it may have run.
    client, server, agent = await hanging(system, llm, "It broke off.")
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        requests = await nc.subscribe(subjects.SANDBOX_MCP_STDIO)
        # (the replica's first answer, on the executor's inbox: it took the call)
        taken = await nc.subscribe(f"{inbox_prefix('executor')}.>")
        task = send_later(system, agent["id"], "Hang.")
        asked = McpStdioRequest.decode((await requests.next_msg(timeout=DEADLINE)).data)
        assert (asked.operation, asked.tool_name) == ("call_tool", "hang")
        while TAKEN_BY not in ((await taken.next_msg(timeout=DEADLINE)).headers or {}):
            pass
        await kill(system, "tool_sandbox")
        result = await finished(task)
        again = await the_rest(requests)
    finally:
        await nc.close()
    assert again == []
    (ret,) = tool_returns(result)
    assert ret[0] == "error" and "stopped during the call" in ret[1], ret
    assert result["messages"][-1]["content"] == "It broke off."
    client.mcp_servers.delete(server.id)
