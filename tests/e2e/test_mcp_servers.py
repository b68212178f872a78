"""The MCP server registry through the official SDK: stdio, SSE and streamable HTTP
servers created, listed, read, partly updated and deleted in Letta's shapes; their
tokens, header values and environment values never in the log or the tables."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import nats
import pytest
from letta_client import ConflictError, NotFoundError, UnprocessableEntityError

from o_contracts import subjects
from tests.e2e.conftest import System
from tests.e2e.support import stored, unique
from tests.servers import operator

pytestmark = pytest.mark.e2e


def stdio(name: str, **env: str) -> dict[str, Any]:
    return {
        "server_name": name,
        "config": {
            "mcp_server_type": "stdio",
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-everything"],
            "env": env or None,
        },
    }


def http(name: str, kind: str = "streamable_http", **extra: Any) -> dict[str, Any]:
    # An address nobody answers at: creation must not depend on the server being up.
    return {
        "server_name": name,
        "config": {"mcp_server_type": kind, "server_url": "http://127.0.0.1:9/mcp", **extra},
    }


async def test_each_kind_is_created_listed_read_and_deleted(system: System) -> None:
    client = system.client()
    made = {
        "stdio": client.mcp_servers.create(**stdio(unique("s"), NODE_ENV="test")),
        "sse": client.mcp_servers.create(**http(unique("e"), "sse", auth_header="Authorization")),
        "streamable_http": client.mcp_servers.create(**http(unique("h"))),
    }
    for kind, server in made.items():
        assert server.id.startswith("mcp_server-") and server.mcp_server_type == kind
    assert made["stdio"].command == "npx"  # type: ignore[union-attr]
    assert made["stdio"].env == {"NODE_ENV": "test"}  # type: ignore[union-attr]
    assert made["sse"].auth_header == "Authorization"  # type: ignore[union-attr]

    listed = {s.id: s for s in client.mcp_servers.list()}
    assert {s.id for s in made.values()} <= set(listed)
    for server in made.values():
        assert client.mcp_servers.retrieve(server.id) == server == listed[server.id]
        # A server that never answered has no tools (it was not asked on creation, or
        # did not answer).
        assert client.mcp_servers.tools.list(server.id) == []

    for server in made.values():
        client.mcp_servers.delete(server.id)
        with pytest.raises(NotFoundError):
            client.mcp_servers.retrieve(server.id)
    assert not {s.id for s in made.values()} & {s.id for s in client.mcp_servers.list()}


async def test_an_update_changes_only_what_it_sends(system: System) -> None:
    client = system.client()
    server = client.mcp_servers.create(**stdio(unique("p"), NODE_ENV="production", PORT="3000"))

    renamed = client.mcp_servers.update(
        server.id, server_name=unique("renamed"), config={"mcp_server_type": "stdio"}
    )
    assert renamed.server_name != server.server_name
    assert (renamed.command, renamed.args, renamed.env) == (  # type: ignore[union-attr]
        server.command,  # type: ignore[union-attr]
        server.args,  # type: ignore[union-attr]
        {"NODE_ENV": "production", "PORT": "3000"},
    )
    moved = client.mcp_servers.update(
        server.id, config={"mcp_server_type": "stdio", "args": ["new.js"], "env": {"A": "1"}}
    )
    assert moved.server_name == renamed.server_name
    assert (moved.command, moved.args, moved.env) == ("npx", ["new.js"], {"A": "1"})  # type: ignore[union-attr]
    assert client.mcp_servers.retrieve(server.id) == moved

    web = client.mcp_servers.create(**http(unique("w"), "sse", auth_token="t-1"))
    changed = client.mcp_servers.update(
        web.id,
        config={"mcp_server_type": "sse", "server_url": "https://new.example.com/sse/v2"},
    )
    assert changed.server_url == "https://new.example.com/sse/v2"  # type: ignore[union-attr]
    assert changed.auth_token == "t-1"  # type: ignore[union-attr]
    client.mcp_servers.delete(server.id)
    client.mcp_servers.delete(web.id)


async def test_bad_requests_change_nothing(system: System) -> None:
    client = system.client()
    before = client.mcp_servers.list()
    with pytest.raises(UnprocessableEntityError):
        client.mcp_servers.create(server_name="no-config", config={})  # type: ignore[arg-type]
    for url in ("ftp://example.com/mcp", "not a url", "http:///mcp"):
        response = await system.http.post(
            "/v1/mcp-servers/",
            json={
                "server_name": unique("u"),
                "config": {"mcp_server_type": "sse", "server_url": url},
            },
        )
        assert response.status_code == 422 and response.json()["detail"], url
    assert client.mcp_servers.list() == before

    server = client.mcp_servers.create(**stdio(unique("dup")))
    with pytest.raises(ConflictError):
        client.mcp_servers.create(**stdio(server.server_name))
    other = client.mcp_servers.create(**http(unique("other")))
    with pytest.raises(ConflictError):
        client.mcp_servers.update(
            other.id, server_name=server.server_name, config={"mcp_server_type": "streamable_http"}
        )
    # A server's transport does not change under it.
    response = await system.http.patch(
        f"/v1/mcp-servers/{server.id}",
        json={"config": {"mcp_server_type": "sse", "server_url": "https://x.example.com"}},
    )
    assert response.status_code == 400 and "stdio" in response.json()["detail"]
    assert client.mcp_servers.retrieve(server.id) == server
    assert client.mcp_servers.retrieve(other.id) == other

    missing = f"mcp_server-{uuid.uuid4()}"
    with pytest.raises(NotFoundError):
        client.mcp_servers.retrieve(missing)
    with pytest.raises(NotFoundError):
        client.mcp_servers.tools.list(missing)
    assert (await system.http.get("/v1/mcp-servers/agent-1")).status_code == 422
    client.mcp_servers.delete(server.id)
    client.mcp_servers.delete(other.id)


async def test_tokens_headers_and_env_never_reach_the_log_or_the_tables(system: System) -> None:
    client = system.client()
    token, header, env = (f"{k}-{uuid.uuid4().hex}" for k in ("tok", "hdr", "env"))
    web = client.mcp_servers.create(
        **http(
            unique("secret"),
            auth_header="X-API-Key",
            auth_token=token,
            custom_headers={"X-Custom": header},
        )
    )
    local = client.mcp_servers.create(**stdio(unique("secret"), API_KEY=env))
    # Shown as Letta shows them: to the client that set them, in plaintext.
    assert (web.auth_header, web.auth_token, web.custom_headers) == (  # type: ignore[union-attr]
        "X-API-Key",
        token,
        {"X-Custom": header},
    )
    assert client.mcp_servers.retrieve(local.id).env == {"API_KEY": env}  # type: ignore[union-attr]
    rotated = f"tok-{uuid.uuid4().hex}"
    client.mcp_servers.update(
        web.id, config={"mcp_server_type": "streamable_http", "auth_token": rotated}
    )
    secrets = (token, header, env, rotated)

    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        ours = {subjects.mcp_server_subject(server_id) for server_id in (web.id, local.id)}
        seen = 0
        for raw in await stored(nc, subjects.EVENTS_STREAM):
            seen += raw.subject in ours
            assert not any(s.encode() in raw.data for s in secrets), raw.seq
        assert seen >= 3  # two creations and an update were read
    finally:
        await nc.close()
    conn = await asyncpg.connect(system.env["DATABASE_URL"])
    try:
        rows = await conn.fetch("SELECT row_to_json(t)::text AS j FROM mcp_servers t")
        assert rows and not any(s in r["j"] for r in rows for s in secrets)
    finally:
        await conn.close()
    client.mcp_servers.delete(web.id)
    client.mcp_servers.delete(local.id)
