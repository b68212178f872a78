"""The console at /console (docs/console.md) without a browser: served by the gateway
without the key, its files carry no data, its assets have sane headers; off with
O_CONSOLE=0. And the run timeline it shows (GET /v1/runs/{id}/timeline)."""

from __future__ import annotations

import httpx

from o_gateway.app import create_app
from o_gateway.routes.console import BUNDLE, load_bundle
from o_gateway.settings import GatewaySettings
from tests.e2e.conftest import System
from tests.fakes.openai_server import FakeOpenAI, Reply

FILES = sorted(load_bundle(BUNDLE))


async def test_the_console_page_is_served_without_the_key(system: System) -> None:
    async with httpx.AsyncClient(base_url=system.base_url) as browser:
        for path in ("/console", "/console/"):
            page = await browser.get(path)
            assert page.status_code == 200, page.text
            assert page.headers["content-type"] == "text/html; charset=utf-8"
            assert '<script type="module" src="/console/app.js"></script>' in page.text
            csp = page.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "connect-src 'self'" in csp
            assert page.headers["x-content-type-options"] == "nosniff"
        # The API itself still wants the key.
        assert (await browser.get("/v1/agents/")).status_code == 401
        missing = await browser.get("/console/secrets.json")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "no console file 'secrets.json'"}


async def test_assets_have_their_type_an_etag_and_are_revalidated(system: System) -> None:
    types = {"js": "text/javascript", "css": "text/css", "html": "text/html"}
    async with httpx.AsyncClient(base_url=system.base_url) as browser:
        for name in FILES:
            asset = await browser.get(f"/console/{name}")
            assert asset.status_code == 200
            kind = name.rsplit(".", 1)[1]
            assert asset.headers["content-type"] == f"{types[kind]}; charset=utf-8"
            assert asset.headers["cache-control"] == "no-cache"
            etag = asset.headers["etag"]
            again = await browser.get(f"/console/{name}", headers={"If-None-Match": etag})
            assert (again.status_code, again.content) == (304, b"")
            head = await browser.head(f"/console/{name}")
            assert head.status_code == 200
            assert head.headers["content-length"] == str(len(asset.content))


async def test_the_console_files_carry_no_data(system: System) -> None:
    created = await system.http.post(
        "/v1/agents/",
        json={
            "name": "Console secret holder",
            "model": "openai/gpt-4o-mini",
            "memory_blocks": [{"label": "human", "value": "Passport 4242-XYZ"}],
        },
    )
    assert created.status_code == 200, created.text
    agent_id = created.json()["id"]
    async with httpx.AsyncClient(base_url=system.base_url) as browser:
        for name in FILES:
            text = (await browser.get(f"/console/{name}")).text
            for secret in ("Console secret holder", "4242-XYZ", agent_id, "test-key"):
                assert secret not in text, f"{name} holds {secret}"


async def test_the_console_is_off_when_the_setting_is_off() -> None:
    # (The gateway's app as the service builds it; no route here reaches the system.)
    app = create_app(None, GatewaySettings(console=False, api_key="k"))  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://o") as browser:
        for path in ("/console", "/console/", "/console/app.js"):
            answer = await browser.get(path)
            assert answer.status_code == 404, path
            assert answer.json() == {"detail": "Not Found"}


async def test_a_runs_timeline_shows_llm_and_tool_calls_with_tokens(
    system: System, llm: FakeOpenAI
) -> None:
    created = await system.http.post(
        "/v1/agents/",
        json={
            "name": "timeline",
            "model": "openai/gpt-4o-mini",
            "memory_blocks": [{"label": "human", "value": "Name: Sam"}],
        },
    )
    agent_id = created.json()["id"]
    llm.push(
        Reply(
            tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})],
            prompt_tokens=100,
            completion_tokens=10,
        ),
        Reply(content="Noted.", prompt_tokens=120, completion_tokens=3),
    )
    reply = await system.http.post(
        f"/v1/agents/{agent_id}/messages",
        json={"messages": [{"role": "user", "content": "I like tea"}]},
    )
    assert reply.status_code == 200, reply.text
    run_id = reply.json()["messages"][0]["run_id"]
    answer = await system.http.get(f"/v1/runs/{run_id}/timeline")
    assert answer.status_code == 200, answer.text
    timeline = answer.json()
    assert timeline["run"]["id"] == run_id and timeline["run"]["status"] == "completed"
    assert timeline["complete"] is True
    kinds = [e["kind"] for e in timeline["entries"]]
    assert kinds == ["started", "llm_call", "tool_call", "llm_call", "completed"]
    started, first, tool, second, end = timeline["entries"]
    assert started["input"] == "I like tea"
    assert (first["model"], first["prompt_tokens"], first["completion_tokens"]) == (
        "openai/gpt-4o-mini",
        100,
        10,
    )
    assert (tool["tool_name"], tool["status"]) == ("memory_insert", "success")
    assert tool["duration_ms"] >= 0 and first["duration_ms"] >= 0
    assert (second["text"], second["completion_tokens"]) == ("Noted.", 3)
    assert (end["stop_reason"], end["step_count"], end["usage"]["total_tokens"]) == (
        "end_turn",
        2,
        233,
    )
    assert timeline["duration_ms"] >= first["duration_ms"] + tool["duration_ms"]


async def test_a_timeline_of_an_unknown_run_is_a_404(system: System) -> None:
    unknown = "run-00000000-0000-4000-8000-000000000000"
    answer = await system.http.get(f"/v1/runs/{unknown}/timeline")
    assert (answer.status_code, answer.json()) == (404, {"detail": f"Run {unknown} not found"})
    bad = await system.http.get("/v1/runs/nope/timeline")
    assert bad.status_code == 422
