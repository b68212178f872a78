"""MCP servers' tools through the official SDK, against a real MCP server written with
the `mcp` SDK: listed when the server is created (streamable HTTP and SSE), read, run,
refreshed when the server changes; a server that is down gives a tool error."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from letta_client import NotFoundError

from tests.e2e.conftest import System

pytest.importorskip("mcp", reason="the mcp package is not installed")

from tests.e2e.mcp_server import Served, fail, served

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[Served]:
    with served() as server:
        yield server


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


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
    assert [t.name for t in tools] == ["echo", "add", "fail"]
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
    assert set(after) == {"echo", "add", "shout"}
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
    echo = client.mcp_servers.tools.list(server.id)[0]
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
    assert [t.name for t in client.mcp_servers.tools.list(server.id)] == ["echo", "add", "fail"]
    client.mcp_servers.delete(server.id)
