"""Bad input stays cheap: each hand-made case is a clear 4xx with a JSON `detail`, nothing of
it is recorded, and the system serves on (issue 10, points 6-8)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from o_contracts import limits
from tests.e2e.conftest import System
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

MISSING_AGENT = "agent-00000000-0000-4000-8000-000000000000"
JSON = {"content-type": "application/json"}


def refused(response: httpx.Response, status: int, *words: str) -> Any:
    """A JSON error with a `detail` (containing `words`) and the expected status."""
    assert response.status_code == status, (response.request.url, response.text[:500])
    assert response.headers["content-type"].startswith("application/json"), response.headers
    detail = response.json()["detail"]
    assert detail
    text = json.dumps(detail)
    for word in words:
        assert word in text, (word, text[:500])
    return detail


async def serves_on(system: System) -> None:
    """A normal write and read right after: the request left nothing stuck behind."""
    created = await system.http.post("/v1/blocks/", json={"label": "ok", "value": "fine"})
    assert created.status_code == 200, created.text
    block_id = created.json()["id"]
    patched = await system.http.patch(f"/v1/blocks/{block_id}", json={"value": "still fine"})
    assert patched.status_code == 200 and patched.json()["value"] == "still fine", patched.text


async def new_agent(system: System, **extra: Any) -> dict[str, Any]:
    body = {
        "model": "openai/gpt-4o-mini",
        "memory_blocks": [{"label": "human", "value": "Name: Sam"}],
        **extra,
    }
    response = await system.http.post("/v1/agents/", json=body)
    assert response.status_code == 200, response.text
    agent: dict[str, Any] = response.json()
    return agent


async def raw_request(system: System, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send bytes as they are (no client normalising the path): status, headers, body."""
    url = urlsplit(system.base_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(request)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    return status, headers, body


def get_line(path: bytes, auth: bool = True) -> bytes:
    key = b"Authorization: Bearer test-key\r\n" if auth else b""
    return b"GET " + path + b" HTTP/1.1\r\nHost: o\r\n" + key + b"Connection: close\r\n\r\n"


# Auth (point 7).


@pytest.mark.parametrize(
    "header",
    [
        None,
        "test-key",  # the raw key without the scheme
        "Bearer wrong-key",
        "Bearer",
        "Bearertest-key",
        "Basic dGVzdC1rZXk6",
        "Token test-key",
        "Bearer test-key extra",
        "bearer  test-key",
    ],
)
async def test_only_bearer_with_the_key_is_accepted(system: System, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    async with httpx.AsyncClient(base_url=system.base_url) as http:
        response = await http.get("/v1/agents/", headers=headers)
        refused(response, 401, "API key")
        assert response.headers["www-authenticate"] == "Bearer"
        # Health needs no key (probes), and the right key gets through.
        assert (await http.get("/v1/health/")).status_code == 200
        ok = await http.get("/v1/agents/", headers={"Authorization": "Bearer test-key"})
        assert ok.status_code == 200


@pytest.mark.parametrize("path", ["/openapi.json", "/docs", "/redoc", "/docs/oauth2-redirect"])
async def test_docs_need_the_key(system: System, path: str) -> None:
    async with httpx.AsyncClient(base_url=system.base_url) as http:
        refused(await http.get(path), 401, "API key")
    assert (await system.http.get(path)).status_code == 200


async def test_openapi_tells_ids_error_shapes_and_statuses(system: System) -> None:
    schema = (await system.http.get("/openapi.json")).json()
    operation = schema["paths"]["/v1/agents/{agent_id}/messages"]["post"]
    (agent_id,) = [p for p in operation["parameters"] if p["name"] == "agent_id"]
    assert agent_id["schema"]["pattern"].startswith("^agent-[0-9a-f]{8}-")
    assert {"401", "404", "413", "422", "503"} <= set(operation["responses"])
    detail = schema["components"]["schemas"]["HTTPValidationError"]["properties"]["detail"]
    assert {"string", "array"} <= {s.get("type") for s in detail["anyOf"]}
    assert "Retry-After" in operation["responses"]["503"]["headers"]
    assert schema["security"] == [{"bearer": []}]
    assert schema["paths"]["/v1/health/"]["get"]["security"] == []


async def test_405_lists_every_method_of_the_path(system: System) -> None:
    response = await system.http.put(f"/v1/agents/{MISSING_AGENT}")
    refused(response, 405)
    assert set(response.headers["allow"].split(", ")) == {"GET", "PATCH", "DELETE"}


async def test_unknown_path_is_json_404(system: System) -> None:
    refused(await system.http.get("/v1/nothing-here"), 404)


# Sizes.


async def test_a_10mb_body_is_refused_before_it_is_read(system: System) -> None:
    response = await system.http.post(
        "/v1/blocks/", content=b"x" * (10 * 1024 * 1024), headers=JSON
    )
    refused(response, 413, "over the limit")
    await serves_on(system)


async def test_a_chunked_body_over_the_limit_is_refused(system: System) -> None:
    chunk = b" " * (1024 * 1024)

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(6):
            yield chunk

    response = await system.http.post("/v1/blocks/", content=chunks(), headers=JSON)
    assert "content-length" not in response.request.headers
    refused(response, 413, "over the limit")
    await serves_on(system)


async def test_a_2mb_message_is_refused(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages",
        json={"messages": [{"role": "user", "content": "x" * 2_000_000}]},
    )
    refused(response, 422, "content", "over the limit")
    # Several messages under the per-text limit still may not carry more together.
    near = "y" * (limits.MAX_INPUT_TEXT_BYTES // 2 + 1)
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages",
        json={"messages": [{"role": "user", "content": near}] * 2},
    )
    refused(response, 422, "over the limit")
    await agent_serves_on(system, llm, agent["id"])


async def test_10000_messages_in_one_request_are_refused(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages",
        json={"messages": [{"role": "user", "content": "hi"}] * 10_000},
    )
    refused(response, 422, "messages", str(limits.MAX_MESSAGES_PER_REQUEST))
    await agent_serves_on(system, llm, agent["id"])


async def agent_serves_on(system: System, llm: FakeOpenAI, agent_id: str) -> None:
    """The agent answers a normal message, and no refused input reached its history."""
    llm.push(Reply(content="still here"))
    response = await system.http.post(
        f"/v1/agents/{agent_id}/messages", json={"messages": [{"role": "user", "content": "ok?"}]}
    )
    assert response.status_code == 200, response.text
    assert [m.get("content") for m in response.json()["messages"]] == ["still here"]
    history = (await system.http.get(f"/v1/agents/{agent_id}/messages")).json()
    users = [m["content"] for m in history if m["message_type"] == "user_message"]
    assert users == ["ok?"], users


async def test_agent_fields_are_bounded(system: System) -> None:
    http = system.http
    big = {"k": "v" * (limits.MAX_OBJECT_BYTES + 10)}
    cases = [
        ({"metadata": big}, "metadata"),
        ({"description": "d" * (limits.MAX_DESCRIPTION_CHARS + 1)}, "description"),
        ({"tags": ["t"] * (limits.MAX_TAGS + 1)}, "tags"),
        ({"tags": ["t" * (limits.MAX_TAG_CHARS + 1)]}, "tags"),
        ({"name": "n" * (limits.MAX_NAME_CHARS + 1)}, "name"),
        ({"llm_config": big}, "llm_config"),
    ]
    for extra, field in cases:
        body = {"model": "openai/gpt-4o-mini", **extra}
        refused(await http.post("/v1/agents/", json=body), 422, field)
    await serves_on(system)


async def test_tools_unknown_by_name_are_named_as_letta_names_them(system: System) -> None:
    """Letta Code creates its agents with tools by name and, told in Letta's words which
    ones a server lacks, creates the agent without them: the words are part of the API."""
    name = "agent-with-unknown-tools"
    body = {
        "model": "openai/gpt-4o-mini",
        "name": name,
        "tools": ["no_such_tool", "memory_insert", "nor_this"],
    }
    detail = refused(await system.http.post("/v1/agents/", json=body), 400)
    assert detail == "Tools not found by name: {'no_such_tool', 'nor_this'}"
    listed = await system.http.get("/v1/agents/", params={"name": name})
    assert listed.status_code == 200 and listed.json() == [], listed.text
    await serves_on(system)


# What Postgres cannot store (point 6): refused before it is appended.


async def test_deep_nesting_is_refused(system: System) -> None:
    deep: Any = "bottom"
    for _ in range(600):
        deep = {"a": deep}
    body = json.dumps({"label": "deep", "metadata": deep})
    refused(await system.http.post("/v1/blocks/", content=body, headers=JSON), 422, "nested")
    # Deeper than the JSON decoder itself goes.
    body = "[" * 100_000 + "]" * 100_000
    refused(await system.http.post("/v1/blocks/", content=body, headers=JSON), 422, "nested")
    await serves_on(system)


async def test_invalid_utf8_is_refused(system: System) -> None:
    for raw in (b'{"label": "a\xff"}', b'{"label": "\xed\xa0\x80"}', b'{"label": "\xc3"}'):
        refused(await system.http.post("/v1/blocks/", content=raw, headers=JSON), 400, "UTF-8")
    await serves_on(system)


async def test_nul_is_refused_everywhere_it_could_be_stored(
    system: System, llm: FakeOpenAI
) -> None:
    http = system.http
    agent = await new_agent(system, description="clean")
    aid = agent["id"]
    block_id = agent["memory"]["blocks"][0]["id"]
    nul = "before\u0000after"
    cases = [
        (http.post(f"/v1/agents/{aid}/messages", json={"messages": [{"content": nul}]}), "content"),
        (http.post(f"/v1/agents/{aid}/messages", json={"input": nul}), "input"),
        (http.patch(f"/v1/blocks/{block_id}", json={"value": nul}), "value"),
        (http.post("/v1/blocks/", json={"label": "b", "value": nul}), "value"),
        (http.patch(f"/v1/agents/{aid}", json={"description": nul}), "description"),
        (http.post("/v1/agents/", json={"model": "openai/gpt-4o-mini", "system": nul}), "system"),
        (http.post(f"/v1/agents/{aid}/archival-memory", json={"text": nul}), "text"),
        (http.patch(f"/v1/agents/{aid}", json={"metadata": {nul: 1}}), "metadata"),
        (http.get("/v1/agents/", params={"name": nul}), "URL"),
        (http.get(f"/v1/agents/{aid}/core-memory/blocks/a%00b"), "URL"),
    ]
    for request, where in cases:
        refused(await request, 422, where, "NUL")
    # Nothing of it was recorded: the agent and its block are as they were.
    after = (await http.get(f"/v1/agents/{aid}")).json()
    assert after["description"] == "clean"
    assert (await http.get(f"/v1/blocks/{block_id}")).json()["value"] == "Name: Sam"
    assert (await http.get(f"/v1/agents/{aid}/archival-memory")).json() == []
    await agent_serves_on(system, llm, aid)
    await serves_on(system)


async def test_lone_surrogates_are_refused(system: System) -> None:
    for raw in (b'{"label": "a", "value": "x\\ud800y"}', b'{"label": "\\udfff"}'):
        refused(await system.http.post("/v1/blocks/", content=raw, headers=JSON), 422, "surrogate")
    await serves_on(system)


async def test_numbers_that_cannot_be_stored_are_refused(system: System) -> None:
    http = system.http
    huge = b'{"label": "n", "metadata": {"n": ' + b"9" * 5000 + b"}}"
    refused(await http.post("/v1/blocks/", content=huge, headers=JSON), 422, "64-bit")
    beyond = {"label": "n", "metadata": {"n": 2**64}}
    refused(await http.post("/v1/blocks/", json=beyond), 422, "64-bit")
    for constant in (b"NaN", b"Infinity", b"1e999"):
        body = b'{"label": "n", "metadata": {"n": ' + constant + b"}}"
        refused(await http.post("/v1/blocks/", content=body, headers=JSON), 422)
    # A block's limit is a Postgres integer.
    refused(await http.post("/v1/blocks/", json={"label": "l", "limit": 2**40}), 422, "limit")
    block = (await http.post("/v1/blocks/", json={"label": "l"})).json()
    refused(await http.patch(f"/v1/blocks/{block['id']}", json={"limit": 2**40}), 422, "limit")
    restore = await http.post(f"/v1/blocks/{block['id']}/versions/{2**40}/restore")
    refused(restore, 422, "version")
    assert (await http.get(f"/v1/blocks/{block['id']}")).json()["limit"] == 100000
    await serves_on(system)


# Ids with path tricks: never another resource, never a 5xx.


@pytest.mark.parametrize(
    "path",
    [
        b"/v1/agents/../blocks/",
        b"/v1/agents/..%2F..%2Fv1%2Fblocks%2F",
        b"/v1/agents/%2e%2e",
        b"/v1/agents/agent-..",
        b"/v1/agents/agent-..%2Fblocks",
        b"/v1/blocks/block-%C3%BC%C3%BC",
        b"/v1/agents/agent-\xc3\xbc",
        b"/v1/agents/agent-%ff%fe",
        b"/v1/agents/" + MISSING_AGENT.encode() + b"%2Fmessages",
        b"/v1/agents/" + MISSING_AGENT.upper().encode(),
        b"/v1/runs/run-00000000-0000-4000-8000-000000000000%00",
    ],
)
async def test_ids_with_path_tricks(system: System, path: bytes) -> None:
    status, headers, body = await raw_request(system, get_line(path))
    assert status in (400, 404, 422), (path, status, body[:300])
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body)["detail"]
    await serves_on(system)
