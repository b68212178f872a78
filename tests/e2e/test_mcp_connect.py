"""Asking an MCP server for its tools without registering it, as the ADE does while a user
fills in a server's form: Letta's `POST /v1/tools/mcp/servers/test` (an answer) and
`/connect` (a stream of events), and `GET /v1/mcp-servers/connect/{id}` for a registered
one. Against real MCP servers written with the `mcp` SDK: streamable HTTP, SSE, one that
wants a token, and a stdio one run by the tool sandbox."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.e2e.conftest import System
from tests.e2e.support import unique

pytest.importorskip("mcp", reason="the mcp package is not installed")

from tests.e2e.mcp_server import LOCK_TOKEN, Served
from tests.e2e.test_mcp_stdio import TOOLS as STDIO_TOOLS
from tests.e2e.test_mcp_stdio import config as stdio_config

pytestmark = pytest.mark.e2e

BASE = "/v1/tools/mcp/servers"
TOOLS = ["echo", "add", "fail", "hold"]
# Nobody answers here.
DOWN = "http://127.0.0.1:9/mcp"


def events(body: str) -> list[dict[str, Any]]:
    """The `data:` events of a stream, decoded."""
    return [
        json.loads(line[len("data: ") :]) for line in body.splitlines() if line.startswith("data: ")
    ]


async def registered(system: System) -> list[str]:
    return sorted((await system.http.get(BASE)).json())


@pytest.mark.parametrize("kind", ["streamable_http", "sse"])
async def test_a_servers_tools_are_told_and_nothing_is_registered(
    system: System, mcp_server: Served, kind: str
) -> None:
    before = await registered(system)
    url = mcp_server.http_url if kind == "streamable_http" else mcp_server.sse_url
    name = unique("try")
    tested = await system.http.post(
        f"{BASE}/test",
        json={
            "server_name": name,
            "type": kind,
            "server_url": url,
            "custom_headers": {"X-Try": name},
        },
    )
    assert tested.status_code == 200, tested.text
    answer = tested.json()
    assert answer["status"] == "success"
    assert [t["name"] for t in answer["tools"]] == TOOLS
    add = answer["tools"][1]
    assert add["description"] == "Add two numbers."
    assert add["inputSchema"]["required"] == ["a", "b"]
    # The server was asked with the config's headers.
    assert any(h.get("x-try") == name for h in mcp_server.headers)

    connected = await system.http.post(
        f"{BASE}/connect", json={"server_name": name, "type": kind, "server_url": url}
    )
    assert connected.status_code == 200
    assert connected.headers["content-type"].startswith("text/event-stream")
    attempt, success = events(connected.text)
    assert attempt == {"event": "connection_attempt", "server_name": name}
    assert success["event"] == "success" and success["tools"] == answer["tools"]
    assert await registered(system) == before


async def test_a_server_that_wants_a_token_says_so_and_works_with_it(
    system: System, mcp_server: Served
) -> None:
    config = {"server_name": unique("locked"), "type": "streamable_http"}
    config["server_url"] = mcp_server.locked_url
    refused = await system.http.post(f"{BASE}/test", json=config)
    assert refused.status_code == 502
    assert "asks for authorization (HTTP 401)" in refused.json()["detail"]
    # It is no OAuth server (no metadata, no registration): the sign-in ends at once.
    stream = events((await system.http.post(f"{BASE}/connect", json=config)).text)
    assert [e["event"] for e in stream] == ["connection_attempt", "oauth_required", "error"]
    assert stream[2]["message"].startswith("OAuth sign-in failed: ")

    with_token = {**config, "auth_header": "Authorization", "auth_token": f"Bearer {LOCK_TOKEN}"}
    tested = await system.http.post(f"{BASE}/test", json=with_token)
    assert tested.status_code == 200, tested.text
    assert [t["name"] for t in tested.json()["tools"]] == TOOLS


async def test_a_server_that_is_down_or_a_bad_config_is_refused_with_the_reason(
    system: System,
) -> None:
    before = await registered(system)
    down = {"server_name": unique("down"), "type": "streamable_http", "server_url": DOWN}
    tested = await system.http.post(f"{BASE}/test", json=down)
    assert tested.status_code == 502 and "could not be reached" in tested.json()["detail"]
    stream = events((await system.http.post(f"{BASE}/connect", json=down)).text)
    assert [e["event"] for e in stream] == ["connection_attempt", "error"]
    assert stream[1]["message"].startswith("Connection failed: ")

    for bad in (
        {"server_name": "x", "type": "sse", "server_url": "ftp://example.com/sse"},
        {"server_name": "x", "type": "streamable_http"},
        {"type": "sse", "server_url": DOWN},
        {"server_name": "x", "type": "stdio", "command": ""},
    ):
        for route in ("test", "connect"):
            response = await system.http.post(f"{BASE}/{route}", json=bad)
            assert response.status_code == 422, (route, bad, response.text)
            assert response.json()["detail"]
    assert await registered(system) == before


async def test_a_stdio_config_is_started_confined_and_asked(system: System) -> None:
    word = f"word-{uuid.uuid4().hex}"
    config = stdio_config(SECRET_WORD=word)
    config.pop("mcp_server_type")
    body = {"server_name": unique("stdio"), "type": "stdio", **config}
    tested = await system.http.post(f"{BASE}/test", json=body)
    assert tested.status_code == 200, tested.text
    assert [t["name"] for t in tested.json()["tools"]] == STDIO_TOOLS
    stream = events((await system.http.post(f"{BASE}/connect", json=body)).text)
    assert [e["event"] for e in stream] == ["connection_attempt", "success"]

    missing = {**body, "command": "no-such-mcp-server"}
    refused = await system.http.post(f"{BASE}/test", json=missing)
    assert refused.status_code == 502
    assert "command not found: no-such-mcp-server" in refused.json()["detail"]


async def test_a_registered_server_is_connected_by_id(system: System, mcp_server: Served) -> None:
    client = system.client()
    server = client.mcp_servers.create(
        server_name=unique("by-id"),
        config={"mcp_server_type": "sse", "server_url": mcp_server.sse_url},  # type: ignore[typeddict-item]
    )
    connected = await system.http.get(f"/v1/mcp-servers/connect/{server.id}")
    attempt, success = events(connected.text)
    assert attempt == {"event": "connection_attempt", "server_name": server.server_name}
    assert [t["name"] for t in success["tools"]] == TOOLS
    client.mcp_servers.update(
        server.id, config={"mcp_server_type": "sse", "server_url": DOWN.replace("/mcp", "/sse")}
    )
    stream = events((await system.http.get(f"/v1/mcp-servers/connect/{server.id}")).text)
    assert [e["event"] for e in stream] == ["connection_attempt", "error"]
    client.mcp_servers.delete(server.id)
    gone = await system.http.get(f"/v1/mcp-servers/connect/{server.id}")
    assert gone.status_code == 404 and gone.json()["detail"]
