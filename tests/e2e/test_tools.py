"""User tools end to end: registered from source, attached to agents, called by the model,
run in the sandbox; secrets reach only their agent's runs and never the log or the tables."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import asyncpg
import nats
import pytest
from letta_client import BadRequestError, ConflictError, NotFoundError

from o_contracts import subjects
from tests.e2e.conftest import System
from tests.e2e.support import new_agent, send, stored
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.servers import operator

pytestmark = pytest.mark.e2e

WEATHER = '''
def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather for a city.

    Args:
        city: The city to look up.
        unit: celsius or fahrenheit.
    """
    print(f"looking up {city}")
    return f"Sunny in {city}, 21 degrees {unit}"
'''

TOKEN_CHECK = '''
import hashlib
import os

def token_fingerprint() -> str:
    """Fingerprint of the API token this agent's tools were given."""
    return hashlib.sha256(os.environ.get("API_TOKEN", "").encode()).hexdigest()
'''


async def test_tool_registry_with_the_official_client(system: System) -> None:
    client = system.client()
    tool = await asyncio.to_thread(client.tools.create, source_code=WEATHER, tags=["demo"])
    assert tool.id.startswith("tool-") and tool.name == "get_weather"
    assert tool.json_schema == {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city to look up."},
                "unit": {"type": "string", "description": "celsius or fahrenheit."},
            },
            "required": ["city"],
        },
    }
    assert (await asyncio.to_thread(client.tools.retrieve, tool.id)).source_code == WEATHER
    names = [t.name for t in await asyncio.to_thread(lambda: list(client.tools.list()))]
    assert "get_weather" in names and "memory_insert" in names
    # A second tool of the same name is a conflict; PUT updates it in place.
    with pytest.raises(ConflictError):
        await asyncio.to_thread(client.tools.create, source_code=WEATHER)
    newer = WEATHER.replace("Sunny", "Cloudy")
    upserted = await asyncio.to_thread(client.tools.upsert, source_code=newer)
    assert upserted.id == tool.id and "Cloudy" in (upserted.source_code or "")
    updated = await asyncio.to_thread(
        client.tools.update, tool.id, return_char_limit=10, default_requires_approval=True
    )
    assert (updated.return_char_limit, updated.default_requires_approval) == (10, True)
    # Agents take it by id, with secrets; the SDK reads them back (values redacted).
    agent = await asyncio.to_thread(
        client.agents.create,
        model="openai/gpt-4o-mini",
        tool_ids=[tool.id],
        secrets={"WEATHER_KEY": "k-123"},
    )
    assert [s.key for s in agent.secrets or []] == ["WEATHER_KEY"]
    assert {s.value for s in agent.secrets or []} == {"****"}
    listed = await asyncio.to_thread(lambda: list(client.agents.tools.list(agent.id)))
    assert "get_weather" in [t.name for t in listed]
    detached = await asyncio.to_thread(client.agents.tools.detach, tool.id, agent_id=agent.id)
    assert detached is not None and "get_weather" not in [t.name for t in detached.tools]
    await asyncio.to_thread(client.tools.delete, tool.id)
    with pytest.raises(NotFoundError):
        await asyncio.to_thread(client.tools.retrieve, tool.id)


async def test_source_that_cannot_be_a_tool_is_a_clear_400(system: System) -> None:
    cases = {
        "def f(:\n": "does not parse",
        "x = 1\n": "no top-level function",
        'def f(x):\n    """F.\n\n    Args:\n        x: X.\n    """\n': "no type annotation",
        'def f(x: int | str):\n    """F.\n\n    Args:\n        x: X.\n    """\n': "JSON schema",
    }
    for source, detail in cases.items():
        response = await system.http.post("/v1/tools/", json={"source_code": source})
        assert response.status_code == 400, response.text
        assert detail in response.json()["detail"]
    response = await system.http.post(
        "/v1/tools/", json={"source_code": WEATHER.replace("get_weather", "memory_insert")}
    )
    assert response.status_code == 409
    with pytest.raises(BadRequestError):
        await asyncio.to_thread(system.client().tools.create, source_code="pass")
    assert (await system.http.get("/v1/tools/", params={"name": "f"})).json() == []


async def create_tool(system: System, source: str, **extra: Any) -> dict[str, Any]:
    response = await system.http.post("/v1/tools/", json={"source_code": source, **extra})
    assert response.status_code == 200, response.text
    tool: dict[str, Any] = response.json()
    return tool


async def test_the_model_calls_a_user_tool_that_runs_in_the_sandbox(
    system: System, llm: FakeOpenAI
) -> None:
    tool = await create_tool(system, WEATHER.replace("get_weather", "weather_now"))
    agent = await new_agent(system, tool_ids=[tool["id"]])
    assert "weather_now" in [t["name"] for t in agent["tools"]]
    llm.push(
        Reply(tool_calls=[("weather_now", {"city": "Paris"})]),
        Reply(content="It is sunny in Paris."),
    )
    result = await send(system, agent["id"], "Weather in Paris?")
    types = [m["message_type"] for m in result["messages"]]
    assert types == ["tool_call_message", "tool_return_message", "assistant_message"]
    ret = result["messages"][1]
    assert (ret["status"], ret["tool_return"]) == ("success", "Sunny in Paris, 21 degrees celsius")
    assert ret["stdout"] == ["looking up Paris"] and ret["stderr"] == []
    # The model was offered the tool's derived schema, and saw the result.
    offered = {t["function"]["name"]: t["function"] for t in llm.requests[0]["tools"]}
    assert offered["weather_now"]["parameters"]["required"] == ["city"]
    assert llm.requests[1]["messages"][-1]["content"] == "Sunny in Paris, 21 degrees celsius"
    # The stored history renders the same tool return.
    history = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    stored = [m for m in history if m["message_type"] == "tool_return_message"]
    assert stored[0]["stdout"] == ["looking up Paris"]

    # A failing tool is an error return with the reason; the run goes on.
    broken = await create_tool(
        system,
        'def explode() -> str:\n    """Fail."""\n    raise RuntimeError("kaboom")\n',
    )
    attached = await system.http.patch(f"/v1/agents/{agent['id']}/tools/attach/{broken['id']}")
    assert attached.status_code == 200
    llm.push(Reply(tool_calls=[("explode", {})]), Reply(content="That failed."))
    result = await send(system, agent["id"], "try it")
    ret = result["messages"][1]
    assert ret["status"] == "error" and "RuntimeError: kaboom" in ret["tool_return"]
    # Its traceback is its stderr, one text as Letta gives it: the tool's frames only.
    (stderr,) = ret["stderr"]
    assert stderr.startswith("Traceback (most recent call last):")
    assert stderr.endswith("RuntimeError: kaboom") and "in explode" in stderr
    assert "worker" not in stderr
    assert result["stop_reason"]["stop_reason"] == "end_turn"

    listed = (await system.http.get(f"/v1/agents/{agent['id']}/tools")).json()
    assert {"weather_now", "explode"} <= {t["name"] for t in listed}
    detached = await system.http.patch(f"/v1/agents/{agent['id']}/tools/detach/{broken['id']}")
    assert "explode" not in [t["name"] for t in detached.json()["tools"]]
    # Detached, the tool is no longer offered and a call to it is refused.
    llm.push(Reply(tool_calls=[("explode", {})]), Reply(content="ok"))
    result = await send(system, agent["id"], "again")
    assert "not available" in result["messages"][1]["tool_return"]
    assert "explode" not in {t["function"]["name"] for t in llm.requests[-2]["tools"]}


async def test_a_tool_return_is_cut_to_its_limit(system: System, llm: FakeOpenAI) -> None:
    tool = await create_tool(
        system,
        'def chatty() -> str:\n    """Talk."""\n    return "x" * 500\n',
        return_char_limit=20,
    )
    agent = await new_agent(system, tool_ids=[tool["id"]])
    llm.push(Reply(tool_calls=[("chatty", {})]), Reply(content="ok"))
    ret = (await send(system, agent["id"], "talk"))["messages"][1]
    assert ret["tool_return"].startswith("x" * 20 + "\n[truncated")


async def test_agent_secrets_reach_only_its_tool_runs_and_never_the_log(
    system: System, llm: FakeOpenAI
) -> None:
    secret = "tok-e2e-7c1f0d2b9a"
    tool = await create_tool(system, TOKEN_CHECK)
    with_secret = await new_agent(system, tool_ids=[tool["id"]], secrets={"API_TOKEN": secret})
    without = await new_agent(system, tool_ids=[tool["id"]])
    assert with_secret["secrets"] == [
        {"agent_id": with_secret["id"], "key": "API_TOKEN", "value": "****", "description": None}
    ]
    assert with_secret["tool_exec_environment_variables"][0]["value"] == "****"

    async def fingerprint(agent_id: str) -> str:
        llm.push(Reply(tool_calls=[("token_fingerprint", {})]), Reply(content="done"))
        ret = (await send(system, agent_id, "check"))["messages"][1]
        assert ret["status"] == "success", ret
        return str(ret["tool_return"])

    assert await fingerprint(with_secret["id"]) == hashlib.sha256(secret.encode()).hexdigest()
    assert await fingerprint(without["id"]) == hashlib.sha256(b"").hexdigest()

    # Rotating the value through PATCH reaches the next run.
    patched = await system.http.patch(
        f"/v1/agents/{with_secret['id']}",
        json={"tool_exec_environment_variables": {"API_TOKEN": secret + "-2"}},
    )
    assert patched.status_code == 200 and patched.json()["secrets"][0]["value"] == "****"
    expected = hashlib.sha256((secret + "-2").encode()).hexdigest()
    assert await fingerprint(with_secret["id"]) == expected

    # Nowhere in the log (events and commands) nor in any table.
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        for stream in (subjects.EVENTS_STREAM, subjects.COMMANDS_STREAM):
            held = await stored(nc, stream)
            assert held, stream
            for raw in held:
                assert secret.encode() not in raw.data, (stream, raw.seq)
    finally:
        await nc.close()
    conn = await asyncpg.connect(system.env["DATABASE_URL"])
    try:
        for table in ("agents", "messages", "runs", "tools"):
            rows = await conn.fetch(f"SELECT row_to_json(t)::text AS j FROM {table} t")
            assert not any(secret in r["j"] for r in rows), table
    finally:
        await conn.close()


async def test_secrets_need_a_valid_name(system: System) -> None:
    response = await system.http.post(
        "/v1/agents/", json={"model": "openai/m", "secrets": {"not a name": "x"}}
    )
    assert response.status_code == 422


async def test_health_reports_the_sandbox_isolation(system: System) -> None:
    health = (await system.http.get("/v1/health/")).json()
    sandbox = health["sandbox"]
    assert sandbox["available"] is True
    assert sandbox["network"] in (
        "network namespace + seccomp (no sockets)",
        "seccomp (no sockets)",
    )
    assert {"wall_clock_seconds", "cpu_seconds", "memory_bytes", "processes"} <= set(
        sandbox["limits"]
    )


async def test_a_tool_that_asks_for_approval_waits_until_the_agent_turns_it_off(
    system: System, llm: FakeOpenAI
) -> None:
    tool = await create_tool(
        system,
        WEATHER.replace("get_weather", "guarded_weather"),
        default_requires_approval=True,
    )
    agent = await new_agent(system)
    attached = await system.http.patch(f"/v1/agents/{agent['id']}/tools/attach/{tool['id']}")
    assert {"type": "requires_approval", "tool_name": "guarded_weather"} in [
        {k: r[k] for k in ("type", "tool_name")} for r in attached.json()["tool_rules"]
    ]
    llm.push(Reply(tool_calls=[("guarded_weather", {"city": "Oslo"})]))
    waiting = await send(system, agent["id"], "Weather in Oslo?")
    assert waiting["stop_reason"]["stop_reason"] == "requires_approval"
    assert [m["message_type"] for m in waiting["messages"]] == ["approval_request_message"]
    # Answer the pending call (deny), then turn approval off for this agent.
    call_id = waiting["messages"][0]["tool_call"]["tool_call_id"]
    llm.push(Reply(content="Understood."))
    denied = await system.http.post(
        f"/v1/agents/{agent['id']}/messages",
        json={
            "messages": [
                {
                    "type": "approval",
                    "approvals": [
                        {
                            "type": "approval",
                            "tool_call_id": call_id,
                            "approve": False,
                            "reason": "no",
                        }
                    ],
                }
            ]
        },
    )
    assert denied.status_code == 200, denied.text
    off = await system.http.patch(
        f"/v1/agents/{agent['id']}/tools/approval/guarded_weather",
        json={"requires_approval": False},
    )
    assert off.status_code == 200, off.text
    assert not [r for r in off.json()["tool_rules"] if r["type"] == "requires_approval"]
    llm.push(Reply(tool_calls=[("guarded_weather", {"city": "Oslo"})]), Reply(content="Sunny."))
    ran = await send(system, agent["id"], "And now?")
    assert ran["stop_reason"]["stop_reason"] == "end_turn"
    returns = [m for m in ran["messages"] if m["message_type"] == "tool_return_message"]
    assert returns[0]["status"] == "success" and "Oslo" in returns[0]["tool_return"]
    unknown = await system.http.patch(
        f"/v1/agents/{agent['id']}/tools/approval/no_such_tool",
        json={"requires_approval": True},
    )
    assert unknown.status_code == 404 and "no_such_tool" in unknown.json()["detail"]
