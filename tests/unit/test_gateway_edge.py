"""The gateway's edge in process: auth settings, limits before routing, the OpenAPI document.

Only what answers before a handler touches NATS or Postgres is tested here (no
gateway state); the same behaviour against the running system is in
tests/e2e/test_bad_input.py.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from o_contracts.ids import new_id
from o_gateway.app import create_app

KEY = {"Authorization": "Bearer k"}


async def gateway(monkeypatch: pytest.MonkeyPatch, **env: str) -> httpx.AsyncClient:
    for name in ("O_API_KEY", "O_OPEN_DOCS", "O_MAX_BODY_BYTES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    app = create_app(None)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://gateway")


@pytest.fixture
async def secured(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    async with await gateway(monkeypatch, O_API_KEY="k", O_MAX_BODY_BYTES="2048") as http:
        yield http


async def test_open_docs_opens_only_the_docs(monkeypatch: pytest.MonkeyPatch) -> None:
    async with await gateway(monkeypatch, O_API_KEY="k", O_OPEN_DOCS="1") as http:
        for path in ("/openapi.json", "/docs", "/redoc"):
            assert (await http.get(path)).status_code == 200, path
        refused = await http.get("/v1/agents/count")
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        # A path that only starts like a doc path is not one.
        assert (await http.get("/docs-and-more")).status_code == 401


async def test_without_a_key_nothing_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    async with await gateway(monkeypatch) as http:
        assert (await http.get("/openapi.json")).status_code == 200
        schema = (await http.get("/openapi.json")).json()
        assert "security" not in schema
        assert "401" not in schema["paths"]["/v1/agents/"]["get"]["responses"]


async def test_the_scheme_is_case_insensitive_the_key_is_not(
    secured: httpx.AsyncClient,
) -> None:
    assert (await secured.get("/openapi.json", headers={"Authorization": "bearer k"})).is_success
    for header in ("k", "Bearer K", "Bearer k ", "Bearer  k", "Basic k"):
        response = await secured.get("/openapi.json", headers={"Authorization": header})
        assert response.status_code == 401, header


async def test_a_body_over_the_limit_is_413_whatever_the_route(
    secured: httpx.AsyncClient,
) -> None:
    for method, path in (("POST", "/v1/blocks/"), ("GET", "/v1/agents/count")):
        response = await secured.request(method, path, content=b"x" * 4096, headers=KEY)
        assert response.status_code == 413, response.text
        assert "2048" in response.json()["detail"]
    # Without a Content-Length (chunked), counted as it arrives.

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b" " * 1024

    response = await secured.post(
        "/v1/blocks/", content=chunks(), headers={**KEY, "content-type": "application/json"}
    )
    assert response.status_code == 413, response.text


async def test_a_long_query_is_414(secured: httpx.AsyncClient) -> None:
    response = await secured.get("/v1/agents/", params={"name": "n" * 9000}, headers=KEY)
    assert response.status_code == 414 and response.json()["detail"]


async def test_o_max_body_bytes_must_be_a_size(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="O_MAX_BODY_BYTES"):
        await gateway(monkeypatch, O_MAX_BODY_BYTES="lots")


async def test_openapi_id_patterns_match_real_ids(secured: httpx.AsyncClient) -> None:
    schema = (await secured.get("/openapi.json", headers=KEY)).json()
    patterns = {
        (param["name"], param["schema"].get("pattern"))
        for ops in schema["paths"].values()
        for op in ops.values()
        for param in op.get("parameters", [])
        if param["in"] == "path" and param["name"].endswith("_id")
    }
    assert {name for name, _ in patterns} >= {"agent_id", "block_id", "tool_id", "run_id"}
    prefixes = {
        "memory_id": "passage",
        "conversation_id": "conv",
        "folder_id": "source",
        "sandbox_config_id": "sandbox",
    }
    for name, pattern in patterns:
        assert pattern is not None, name
        prefix = prefixes.get(name, name.removesuffix("_id"))
        real = f"sandbox-env-{uuid.uuid4()}" if name == "env_var_id" else new_id(prefix)  # type: ignore[arg-type]
        assert re.match(pattern, real)
        assert not re.match(pattern, real + "/x")


async def test_every_operation_documents_its_errors(secured: httpx.AsyncClient) -> None:
    schema = (await secured.get("/openapi.json", headers=KEY)).json()
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            statuses = set(op["responses"])
            assert {"413", "422", "500", "503"} <= statuses, (method, path)
            # (Open without the key: health, readiness, and the browser's return from an
            # OAuth sign-in.)
            open_path = (
                path.startswith(("/v1/health", "/v1/ready"))
                or path == "/v1/tools/mcp/oauth/callback"
            )
            assert ("401" in statuses) != open_path, (method, path)
            if "{" in path:
                assert "404" in statuses, (method, path)
            for status, response in op["responses"].items():
                if status >= "400":
                    ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert ref.endswith(("/ErrorResponse", "/HTTPValidationError"))
