"""MCP's OAuth sign-in, as the ADE runs it against Letta: connect a server that answers 401,
get an authorization URL on the stream, sign in in a browser (the test follows the URL and
its redirect to O's callback, without O's API key), and the stream ends with the server's
tools. Then every call to that address carries the tokens: listing, running a tool from the
API, an agent's call; expired tokens are refreshed and the refresh recorded; refused ones
fail with a reason. Against a real MCP server with its own authorization server, written with
the `mcp` SDK (tests/e2e/mcp_oauth_server.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import nats
import pytest

from o_contracts import subjects
from o_contracts.envelope import Envelope, decode
from tests.e2e.conftest import System
from tests.e2e.support import (
    connected,
    event_types,
    new_agent,
    on_subject,
    plaintext_found,
    projected,
    send,
    unique,
)
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.servers import Servers, operator

pytest.importorskip("mcp", reason="the mcp package is not installed")

from tests.e2e.mcp_oauth_server import OAuthServed, oauth_served

pytestmark = pytest.mark.e2e

BASE = "/v1/tools/mcp/servers"
CALLBACK = "/v1/tools/mcp/oauth/callback"


class Stream:
    """A connect stream read event by event."""

    def __init__(self, lines: AsyncIterator[str]) -> None:
        self.lines = lines

    async def next(self) -> dict[str, Any]:
        async for line in self.lines:
            if line.startswith("data: "):
                found: dict[str, Any] = json.loads(line[len("data: ") :])
                return found
        raise AssertionError("the stream ended")

    async def rest(self) -> list[dict[str, Any]]:
        return [json.loads(line[6:]) async for line in self.lines if line.startswith("data: ")]


@asynccontextmanager
async def connecting(system: System, config: dict[str, Any]) -> AsyncIterator[Stream]:
    async with system.http.stream("POST", f"{BASE}/connect", json=config) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Stream(response.aiter_lines())


async def until_sent_to_sign_in(stream: Stream, name: str) -> tuple[str, str]:
    """The stream's events up to the authorization URL; the URL and the sign-in's id."""
    assert await stream.next() == {"event": "connection_attempt", "server_name": name}
    assert await stream.next() == {
        "event": "oauth_required",
        "message": "OAuth authentication required",
    }
    sent = await stream.next()
    assert sent["event"] == "authorization_url"
    assert sent["session_id"].startswith("mcp_oauth-")
    assert await stream.next() == {
        "event": "waiting_for_auth",
        "message": "Waiting for user authorization...",
    }
    return sent["url"], sent["session_id"]


async def browser_back(system: System, authorization_url: str) -> str:
    """What the user's browser does: sign in (this server approves at once) and be sent
    back; the address it is sent back to (O's callback, with the code and state)."""
    async with httpx.AsyncClient() as browser:
        approved = await browser.get(authorization_url, follow_redirects=False)
    assert approved.status_code == 302, approved.text
    back: str = approved.headers["location"]
    assert back.startswith(system.base_url.rstrip("/") + CALLBACK + "?")
    return back


async def callback(url: str) -> dict[str, Any]:
    """O's callback, as a browser calls it: without O's API key."""
    async with httpx.AsyncClient() as browser:
        answered = await browser.get(url)
    assert answered.status_code == 200, answered.text
    body: dict[str, Any] = answered.json()
    return body


async def signed_in(
    system: System, served: OAuthServed, kind: str = "streamable_http"
) -> tuple[str, str]:
    """Connect the server and sign in; the server's name and the sign-in's id."""
    name = unique("oauth")
    config = {"server_name": name, "type": kind, "server_url": served.url}
    async with connecting(system, config) as stream:
        url, session_id = await until_sent_to_sign_in(stream, name)
        back = await browser_back(system, url)
        assert await callback(back) == {
            "status": "success",
            "message": "Authorization successful",
            "server_url": served.url,
        }
        done = await stream.rest()
    assert [e["event"] for e in done] == ["success"]
    assert [t["name"] for t in done[0]["tools"]] == ["whisper"]
    return name, session_id


async def sign_in_events(system: System, session_id: str) -> list[tuple[str, bytes]]:
    """(type, raw bytes) of the sign-in's events in the log."""
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        found = await on_subject(nc, subjects.mcp_oauth_subject(session_id))
    finally:
        await nc.close()
    return [(decode(raw).type, raw) for _, raw in found]


async def register(
    system: System, name: str, url: str, kind: str = "streamable_http"
) -> dict[str, Any]:
    created = await system.http.post(
        "/v1/mcp-servers/",
        json={"server_name": name, "config": {"mcp_server_type": kind, "server_url": url}},
    )
    assert created.status_code == 200, created.text
    server: dict[str, Any] = created.json()
    return server


async def run_whisper(system: System, server_id: str, word: str) -> httpx.Response:
    tools = (await system.http.get(f"/v1/mcp-servers/{server_id}/tools")).json()
    (whisper,) = [t for t in tools if t["name"] == "whisper"]
    return await system.http.post(
        f"/v1/mcp-servers/{server_id}/tools/{whisper['id']}/run", json={"args": {"word": word}}
    )


async def agent_whispers(system: System, llm: FakeOpenAI, server_id: str) -> None:
    """An agent with the server's tool calls it in a run (the executor's call), and gets
    the server's answer."""
    tools = (await system.http.get(f"/v1/mcp-servers/{server_id}/tools")).json()
    agent = await new_agent(system, tool_ids=[tools[0]["id"]])
    llm.push(Reply(tool_calls=[("whisper", {"word": "run"})]), Reply(content="Said."))
    result = await send(system, agent["id"], "Whisper run.")
    returns = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
    assert [(r["status"], r["tool_return"]) for r in returns] == [("success", "psst: run")]


async def test_a_server_signed_in_to_serves_every_call_with_its_tokens(
    system: System, servers: Servers, llm: FakeOpenAI
) -> None:
    with oauth_served() as served:
        name, session_id = await signed_in(system, served)
        assert served.issuer.log == ["registered", "authorized", "exchanged"]
        (access,) = served.issuer.access
        (refresh,) = served.issuer.refresh

        # Registered afterwards (no session id is sent, as with Letta): its tools are
        # listed with the tokens, and its tools run with them, from the API and in a run.
        server = await register(system, name, served.url)
        ran = await run_whisper(system, server["id"], "hello")
        assert ran.status_code == 200, ran.text
        assert ran.json()["func_return"] == "psst: hello"
        await agent_whispers(system, llm, server["id"])

        # Connecting again uses the tokens: no second sign-in.
        config = {"server_name": name, "type": "streamable_http", "server_url": served.url}
        async with connecting(system, config) as stream:
            assert [e["event"] for e in await stream.rest()] == ["connection_attempt", "success"]
        assert served.issuer.log == ["registered", "authorized", "exchanged"]

        # The log has the sign-in, with no token, code or client secret in plaintext.
        recorded = await sign_in_events(system, session_id)
        assert [t for t, _ in recorded] == [
            "McpOAuthStarted",
            "McpOAuthCallbackReceived",
            "McpOAuthAuthorized",
        ]
        # Nor anywhere else: the NATS store, Postgres.
        (client,) = served.issuer.clients.values()
        for secret in (access, refresh, client.client_secret or ""):
            assert secret
            assert not any(secret.encode() in raw for _, raw in recorded)
            assert (
                await plaintext_found(system.env["DATABASE_URL"], servers.nats_store, secret) == []
            )
        await system.http.delete(f"/v1/mcp-servers/{server['id']}")


async def test_expired_tokens_are_refreshed_and_the_refresh_recorded(
    system: System, llm: FakeOpenAI
) -> None:
    # Tokens that last 30 s are always due for a refresh (O refreshes a minute early).
    with oauth_served(lifetime=30) as served:
        name, session_id = await signed_in(system, served)
        server = await register(system, name, served.url)
        assert served.issuer.log.count("refreshed") == 1  # (the tools listed on creation)
        for word in ("one", "two"):
            ran = await run_whisper(system, server["id"], word)
            assert ran.json()["func_return"] == f"psst: {word}"
        # Each refresh spent the refresh token before it (rotated): each call started
        # from the tokens the one before recorded.
        assert served.issuer.log.count("refreshed") == 3

        await agent_whispers(system, llm, server["id"])
        assert served.issuer.log.count("refreshed") == 4

        recorded = await sign_in_events(system, session_id)
        refreshed = [decode(raw) for t, raw in recorded if t == "McpOAuthTokensRefreshed"]
        assert [e.producer for e in refreshed] == ["gateway", "gateway", "gateway", "executor"]
        await system.http.delete(f"/v1/mcp-servers/{server['id']}")


async def test_refused_tokens_fail_the_call_and_connecting_signs_in_again(
    system: System,
) -> None:
    with oauth_served() as served:
        name, _ = await signed_in(system, served)
        server = await register(system, name, served.url)
        served.issuer.revoke_all()
        ran = await run_whisper(system, server["id"], "x")
        assert ran.json()["status"] == "error"
        assert "connect the server again" in ran.json()["func_return"]

        config = {"server_name": name, "type": "streamable_http", "server_url": served.url}
        async with connecting(system, config) as stream:
            url, _ = await until_sent_to_sign_in(stream, name)
            assert (await callback(await browser_back(system, url)))["status"] == "success"
            assert [e["event"] for e in await stream.rest()] == ["success"]
        ran = await run_whisper(system, server["id"], "again")
        assert ran.json()["func_return"] == "psst: again"
        await system.http.delete(f"/v1/mcp-servers/{server['id']}")


async def test_a_sign_in_refused_by_the_user_ends_the_stream_with_the_reason(
    system: System,
) -> None:
    with oauth_served() as served:
        name = unique("refused")
        config = {"server_name": name, "type": "streamable_http", "server_url": served.url}
        async with connecting(system, config) as stream:
            url, _ = await until_sent_to_sign_in(stream, name)
            back = await browser_back(system, url)
            state = httpx.URL(back).params["state"]
            refused = f"{system.base_url.rstrip('/')}{CALLBACK}?state={state}&error=access_denied"
            assert await callback(refused + "&error_description=no+thanks") == {
                "status": "error",
                "message": "OAuth error: access_denied - no thanks",
            }
            (ended,) = await stream.rest()
        assert ended == {
            "event": "error",
            "message": "OAuth sign-in failed: OAuth error: access_denied - no thanks",
        }
        # The code that came too late, a state used already, no state: refused.
        assert await callback(back) == {
            "status": "error",
            "message": "Invalid or expired state parameter",
        }
        assert await callback(f"{system.base_url.rstrip('/')}{CALLBACK}?code=x") == {
            "status": "error",
            "message": "Missing state parameter",
        }
        overlong = f"{system.base_url.rstrip('/')}{CALLBACK}?state=s&code={'c' * 5000}"
        assert await callback(overlong) == {
            "status": "error",
            "message": "Invalid callback parameters (too long)",
        }
        assert "exchanged" not in served.issuer.log


async def test_a_sign_in_request_the_guard_refuses_is_not_sent() -> None:
    """The sign-in's discovery goes where the server's metadata points: every request
    passes the guard first (the gateway's is the private-address policy), and a refusal
    ends the sign-in with the guard's reason, before anything is registered."""
    from mcp.client.auth import OAuthClientProvider

    from o_runtime import mcp_client, mcp_oauth
    from o_runtime.mcp_client import McpEndpoint, SignInFailed

    class Memory:
        async def get_tokens(self) -> None:
            return None

        async def set_tokens(self, tokens: object) -> None:
            raise AssertionError("no tokens come")

        async def get_client_info(self) -> None:
            return None

        async def set_client_info(self, info: object) -> None:
            raise AssertionError("nothing is registered")

    async def never(*_: object) -> Any:
        raise AssertionError("never sent to sign in")

    seen: list[str] = []

    def guard(url: str) -> None:
        seen.append(url)
        if "/.well-known/" in url:
            raise SignInFailed(f"refused {url}")

    with oauth_served() as served:
        provider = OAuthClientProvider(
            served.url,
            mcp_oauth.client_metadata("http://127.0.0.1:1/callback"),
            Memory(),
            redirect_handler=never,
            callback_handler=never,
        )
        endpoint = McpEndpoint("streamable_http", served.url, {})
        with pytest.raises(SignInFailed, match=r"refused http://127\.0\.0\.1:\d+/\.well-known/"):
            await mcp_client.list_tools(endpoint, 10, sign_in=provider, guard=guard)
        assert seen[0] == served.url  # (the server itself, answering 401)
        assert served.issuer.log == []


async def test_a_sign_in_past_its_wait_takes_no_code(system: System) -> None:
    """The stream that held a sign-in has ended once its wait is over: a browser coming
    back later (a stale tab, a replayed URL) is refused, and nothing is recorded."""
    from o_contracts.events import McpOAuthStarted
    from o_contracts.ids import new_id
    from o_contracts.projection_names import MCP_SERVERS
    from o_runtime import mcp_oauth

    state = f"state-{unique('old')}"
    session_id = new_id("mcp_oauth")
    started = McpOAuthStarted(
        session_id=session_id,
        server_url="http://127.0.0.1:9/mcp",
        server_name=unique("old"),
        state_digest=mcp_oauth.state_digest(state),
        redirect_uri=f"{system.base_url.rstrip('/')}{CALLBACK}",
    )
    # Started an hour ago (the wait is 300 s and an exchange's 30 s).
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    envelope = Envelope.wrap(started, aggregate_id=session_id, producer="test", time=an_hour_ago)
    subject = subjects.mcp_oauth_subject(session_id)
    async with connected(system) as nc:
        ack = await nc.jetstream().publish(
            subject, envelope.encode(), stream=subjects.EVENTS_STREAM
        )
        await projected(system, ack.seq, MCP_SERVERS)
        answer = await callback(f"{system.base_url.rstrip('/')}{CALLBACK}?state={state}&code=c")
        assert answer == {"status": "error", "message": "Invalid or expired state parameter"}
        assert [t for _, t in await event_types(nc, subject)] == ["McpOAuthStarted"]


async def test_an_sse_server_is_signed_in_to_the_same_way(system: System) -> None:
    with oauth_served(kind="sse") as served:
        name, _ = await signed_in(system, served, "sse")
        server = await register(system, name, served.url, "sse")
        ran = await run_whisper(system, server["id"], "sse")
        assert ran.json()["func_return"] == "psst: sse"
        assert served.issuer.log == ["registered", "authorized", "exchanged"]
        await system.http.delete(f"/v1/mcp-servers/{server['id']}")
