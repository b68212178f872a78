"""A browser app (the Letta ADE at app.letta.com, or one on localhost:3000) may call O:
CORS as Letta's server configures it. A browser sends a preflight before a request with
credentials or custom headers and reads a response only when the answer names its origin."""

from __future__ import annotations

import httpx

from tests.e2e.conftest import System

ADE = "https://app.letta.com"


async def test_a_preflight_from_the_ade_is_answered_without_a_key(system: System) -> None:
    async with httpx.AsyncClient(base_url=system.base_url) as browser:
        answer = await browser.options(
            "/v1/agents/",
            headers={
                "Origin": ADE,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type,x-project",
            },
        )
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == ADE
    assert answer.headers["access-control-allow-credentials"] == "true"
    assert "POST" in answer.headers["access-control-allow-methods"]
    allowed = answer.headers["access-control-allow-headers"].lower()
    assert {"authorization", "content-type", "x-project"} <= {h.strip() for h in allowed.split(",")}


async def test_responses_and_refusals_name_an_allowed_origin(system: System) -> None:
    listed = await system.http.get("/v1/agents/", headers={"Origin": "http://localhost:3000"})
    assert listed.status_code == 200
    assert listed.headers["access-control-allow-origin"] == "http://localhost:3000"
    async with httpx.AsyncClient(base_url=system.base_url) as browser:
        refused = await browser.get("/v1/agents/", headers={"Origin": ADE})
    # Without the key: refused, and the browser app may read why.
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == ADE
    assert "detail" in refused.json()


async def test_another_origin_is_not_allowed(system: System) -> None:
    evil = "https://evil.example"
    answer = await system.http.options(
        "/v1/agents/",
        headers={"Origin": evil, "Access-Control-Request-Method": "GET"},
    )
    assert answer.status_code == 400
    assert "access-control-allow-origin" not in answer.headers
    listed = await system.http.get("/v1/agents/", headers={"Origin": evil})
    assert listed.status_code == 200  # (the server answers; the browser withholds it)
    assert "access-control-allow-origin" not in listed.headers
