"""Letta's sandbox configurations (`/v1/sandbox-config/`) end to end: the local one's
variables reach every tool run beneath the agent's own secrets, its packages are installed
for every tool, values never enter the log in plaintext, and bad input appends nothing.

The local configuration is the whole system's: each test that changes it deletes it before
it ends, so other tests' tool runs never see it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from o_contracts import subjects
from tests.e2e.conftest import System
from tests.e2e.support import appended_since, log_end, new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

PREFIX = "/v1/sandbox-config"
SHOW = '''
def show_sandbox_env() -> str:
    """What this tool run was given."""
    import os
    import otestgreeting
    return "|".join([
        otestgreeting.greeting(os.environ.get("GREET_WHO", "nobody")),
        os.environ.get("LETTA_AGENT_ID", "-"),
        os.environ.get("LETTA_TOOL_ID", "-"),
    ])
'''


async def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json() if status != 204 else None


@pytest.fixture
async def local(system: System) -> AsyncIterator[dict[str, Any]]:
    """The local configuration, deleted (with its variables) when the test ends."""
    config = await ok(await system.http.post(f"{PREFIX}/local/default"))
    yield config
    response = await system.http.delete(f"{PREFIX}/{config['id']}")
    assert response.status_code in (204, 404), response.text


async def run_source(system: System, source: str, **extra: Any) -> dict[str, Any]:
    body = {"source_code": source, "args": {}, **extra}
    answer: dict[str, Any] = await ok(await system.http.post("/v1/tools/run", json=body))
    return answer


async def test_the_local_configuration_reaches_every_tool_run(
    system: System, llm: FakeOpenAI, local: dict[str, Any]
) -> None:
    start = await log_end(system)
    assert local["id"].startswith("sandbox-") and local["type"] == "local"
    assert local["config"]["use_venv"] is False and local["config"]["pip_requirements"] == []
    # /local/default again: the same one, untouched.
    again = await ok(await system.http.post(f"{PREFIX}/local/default"))
    assert (again["id"], again["updated_at"]) == (local["id"], local["updated_at"])
    # Its packages: installed for every tool, whichever names none itself.
    replaced = await ok(
        await system.http.post(
            f"{PREFIX}/",
            json={"config": {"pip_requirements": [{"name": "otestgreeting", "version": "1.0"}]}},
        )
    )
    assert replaced["id"] == local["id"]
    assert replaced["config"]["pip_requirements"] == [{"name": "otestgreeting", "version": "1.0"}]
    # Its variables: for every tool run, beneath the run's own.
    made = await ok(
        await system.http.post(
            f"{PREFIX}/{local['id']}/environment-variable",
            json={"key": "GREET_WHO", "value": "world", "description": "who"},
        )
    )
    assert made["id"].startswith("sandbox-env-") and made["value"] == "world"
    upserted = await ok(
        await system.http.post(
            f"{PREFIX}/{local['id']}/environment-variable",
            json={"key": "GREET_WHO", "value": "planet"},
        )
    )
    assert (upserted["id"], upserted["value"], upserted["description"]) == (
        made["id"],
        "planet",
        "who",
    )
    # The same again changes nothing, and appends nothing.
    same = await ok(
        await system.http.post(
            f"{PREFIX}/{local['id']}/environment-variable",
            json={"key": "GREET_WHO", "value": "planet"},
        )
    )
    assert same["updated_at"] == upserted["updated_at"]
    ran = await run_source(system, SHOW)
    assert ran["status"] == "success", ran
    greeting, agent_id, tool_id = ran["tool_return"].split("|")
    # (Source run on its own: no agent; a tool id of its own, as Letta's unsaved tool has.)
    assert (greeting, agent_id) == ("hello, planet", "-") and tool_id.startswith("tool-")
    assert ran["tool_returns"][0]["type"] == "tool"
    # The request's own variables win over the configuration's.
    ran = await run_source(system, SHOW, env_vars={"GREET_WHO": "request"})
    assert ran["tool_return"].startswith("hello, request|-|tool-")

    # In an agent's turn: the agent's secret wins; the agent's and tool's ids are given.
    tool = await ok(await system.http.post("/v1/tools/", json={"source_code": SHOW}))
    agent = await new_agent(system, tool_ids=[tool["id"]], secrets={"GREET_WHO": "agent"})
    llm.push(Reply(tool_calls=[("show_sandbox_env", {})]), Reply(content="Shown."))
    result = await send(system, agent["id"], "Show it")
    ret = next(m for m in result["messages"] if m["message_type"] == "tool_return_message")
    assert ret["tool_return"] == f"hello, agent|{agent['id']}|{tool['id']}", ret
    other = await new_agent(system, tool_ids=[tool["id"]])
    llm.push(Reply(tool_calls=[("show_sandbox_env", {})]), Reply(content="Shown."))
    result = await send(system, other["id"], "Show it")
    ret = next(m for m in result["messages"] if m["message_type"] == "tool_return_message")
    assert ret["tool_return"] == f"hello, planet|{other['id']}|{tool['id']}", ret

    # Never in plaintext in the log: ciphertext only.
    events = await appended_since(system, start, subjects.sandbox_config_subject(local["id"]))
    assert len(events) == 3  # (replaced, and the variable set twice)
    assert not any(b"planet" in e or b"world" in e for e in events)

    # Deleted, its variables and packages are gone from tool runs.
    await ok(await system.http.delete(f"{PREFIX}/{local['id']}"), 204)
    listed = await ok(await system.http.get(f"{PREFIX}/{local['id']}/environment-variable"))
    assert listed == []
    ran = await run_source(system, SHOW)
    assert ran["status"] == "error" and "No module named 'otestgreeting'" in ran["tool_return"]


async def test_configurations_and_variables_as_letta_serves_them(
    system: System, local: dict[str, Any]
) -> None:
    for other in await ok(await system.http.get(f"{PREFIX}/", params={"sandbox_type": "e2b"})):
        await ok(await system.http.delete(f"{PREFIX}/{other['id']}"), 204)
    e2b = await ok(await system.http.post(f"{PREFIX}/e2b/default"))
    assert e2b["type"] == "e2b" and e2b["config"] == {"timeout": 300}
    # The type follows from the fields, as Letta's does.
    modal = await ok(
        await system.http.post(
            f"{PREFIX}/", json={"config": {"language": "python", "npm_requirements": []}}
        )
    )
    assert modal["type"] == "modal"
    listed = await ok(await system.http.get(f"{PREFIX}/", params={"sandbox_type": "e2b"}))
    assert [c["id"] for c in listed] == [e2b["id"]]
    every = [c["type"] for c in await ok(await system.http.get(f"{PREFIX}/"))]
    assert {"local", "e2b", "modal"} <= set(every)
    # PATCH changes the settings sent and keeps the others; the type cannot change.
    patched = await ok(
        await system.http.patch(f"{PREFIX}/{local['id']}", json={"config": {"use_venv": True}})
    )
    assert patched["config"]["use_venv"] is True and patched["config"]["venv_name"] == "venv"
    mismatch = await system.http.patch(f"{PREFIX}/{local['id']}", json={"config": {"timeout": 5}})
    assert mismatch.status_code == 400 and "Mismatched type" in mismatch.json()["detail"]
    # Variables: rename onto a taken key is a 409; delete is a 204.
    first, second = [
        await ok(
            await system.http.post(
                f"{PREFIX}/{e2b['id']}/environment-variable", json={"key": k, "value": "v"}
            )
        )
        for k in ("FIRST_VAR", "SECOND_VAR")
    ]
    clash = await system.http.patch(
        f"{PREFIX}/environment-variable/{second['id']}", json={"key": "FIRST_VAR"}
    )
    assert clash.status_code == 409, clash.text
    renamed = await ok(
        await system.http.patch(
            f"{PREFIX}/environment-variable/{second['id']}", json={"key": "THIRD_VAR"}
        )
    )
    assert (renamed["key"], renamed["value"]) == ("THIRD_VAR", "v")
    await ok(await system.http.delete(f"{PREFIX}/environment-variable/{first['id']}"), 204)
    gone = await system.http.delete(f"{PREFIX}/environment-variable/{first['id']}")
    assert gone.status_code == 404
    keys = [
        v["key"]
        for v in await ok(await system.http.get(f"{PREFIX}/{e2b['id']}/environment-variable"))
    ]
    assert "THIRD_VAR" in keys and "FIRST_VAR" not in keys
    await ok(await system.http.delete(f"{PREFIX}/{modal['id']}"), 204)
    await ok(await system.http.delete(f"{PREFIX}/{e2b['id']}"), 204)
    # Made again after its deletion: the same type's configuration, with no variable.
    remade = await ok(await system.http.post(f"{PREFIX}/e2b/default"))
    assert remade["id"] == e2b["id"]
    assert await ok(await system.http.get(f"{PREFIX}/{e2b['id']}/environment-variable")) == []
    await ok(await system.http.delete(f"{PREFIX}/{e2b['id']}"), 204)


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "{id}/environment-variable", {"key": "has space", "value": "v"}, 422),
        ("POST", "{id}/environment-variable", {"key": "", "value": "v"}, 422),
        ("POST", "{id}/environment-variable", {"key": "K"}, 422),
        ("POST", "", {"config": {"pip_requirements": "numpy"}}, 422),
        ("POST", "", {"config": {"pip_requirements": [{"name": "--index-url=x"}]}}, 422),
        ("POST", "", {}, 422),
        # (Letta's bodies refuse unknown keys: this must not replace the local configuration.)
        ("POST", "", {"type": "e2b", "config": {}}, 422),
        # An e2b configuration (by its fields) out of bounds: refused, not read as local.
        ("POST", "", {"config": {"timeout": 0}}, 422),
        ("POST", "{id}/environment-variable", {"key": "K", "value": "v", "foo": 1}, 422),
        ("PATCH", "{id}", {}, 422),
        ("PATCH", "sandbox-00000000-0000-4000-8000-000000000000", {"config": {}}, 404),
        ("PATCH", "not-an-id", {"config": {}}, 422),
        (
            "POST",
            "sandbox-00000000-0000-4000-8000-000000000000/environment-variable",
            {"key": "K", "value": "v"},
            404,
        ),
        (
            "PATCH",
            "environment-variable/sandbox-env-00000000-0000-4000-8000-000000000000",
            {"value": "v"},
            404,
        ),
        (
            "DELETE",
            "environment-variable/sandbox-env-00000000-0000-4000-8000-000000000000",
            None,
            404,
        ),
        ("DELETE", "environment-variable/unknown", None, 422),
    ],
)
async def test_bad_requests_append_nothing(
    system: System, local: dict[str, Any], method: str, path: str, body: Any, status: int
) -> None:
    start = await log_end(system)
    url = f"{PREFIX}/{path.format(id=local['id'])}".rstrip("/") + ("/" if not path else "")
    response = await system.http.request(method, url, json=body)
    assert response.status_code == status, response.text
    assert isinstance(response.json()["detail"], str | list)
    assert await appended_since(system, start, "o.evt.sandbox_config.") == []
