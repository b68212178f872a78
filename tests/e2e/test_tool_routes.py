"""Letta's tool routes beyond the registry, end to end: count, search, add-base-tools,
running source without registering it (in the sandbox), generating a schema from
source, and running an agent's tool by name (through the official SDK where it has them)."""

from __future__ import annotations

import asyncio
from typing import Any

import nats
import pytest
from letta_client import BadRequestError, NotFoundError

from o_contracts import subjects
from o_contracts.base_tools import MEMORY_TOOLS, SCHEMAS
from tests.e2e.conftest import System
from tests.e2e.support import event_types, new_agent
from tests.servers import operator

pytestmark = pytest.mark.e2e

FORECAST = '''
def forecast_weather(city: str, days: int = 1) -> str:
    """Forecast the weather for a city.

    Args:
        city: The city to forecast.
        days: How many days ahead.
    """
    print(f"forecasting {city}")
    return f"Rain in {city} for {days} days"
'''

STOCKS = '''
def stock_quote(symbol: str) -> str:
    """Look up a stock's price.

    Args:
        symbol: The ticker symbol.
    """
    return f"{symbol}: 100"
'''

KEYED = '''
import os

def keyed(word: str) -> str:
    """Say the word with the key the tool was given.

    Args:
        word: The word.
    """
    return word + ":" + os.environ.get("SERVICE_KEY", "none")
'''

FAILING = '''
def divide(a: int, b: int) -> float:
    """Divide a by b.

    Args:
        a: The dividend.
        b: The divisor.
    """
    return a / b
'''


async def create_tool(system: System, source: str, **extra: Any) -> dict[str, Any]:
    response = await system.http.post("/v1/tools/", json={"source_code": source, **extra})
    assert response.status_code == 200, response.text
    tool: dict[str, Any] = response.json()
    return tool


async def count(system: System, **params: Any) -> Any:
    response = await system.http.get("/v1/tools/count", params=params)
    return response


async def test_count_agrees_with_the_list_under_each_filter(system: System) -> None:
    before = await count(system)
    assert before.status_code == 200, before.text
    listed = await system.http.get("/v1/tools/", params={"limit": 1000})
    assert before.json() == len(listed.json())
    tool = await create_tool(system, STOCKS, tags=["finance"])
    assert (await count(system)).json() == before.json() + 1
    assert (await count(system, name="stock_quote")).json() == 1
    assert (await count(system, tool_ids=f"{tool['id']},tool-missing")).json() == 1
    assert (await count(system, search="STOCK")).json() == 1
    builtin = len(SCHEMAS)
    assert (await count(system, return_only_letta_tools=True)).json() == builtin
    total = (await count(system)).json()
    assert (await count(system, exclude_letta_tools=True)).json() == total - builtin
    custom = (await count(system, tool_types="custom")).json()
    assert custom >= 1
    assert (await count(system, exclude_tool_types="custom")).json() == total - custom
    bad = await count(system, tool_types="not_a_type")
    assert bad.status_code == 400
    assert "Invalid tool_type 'not_a_type'" in bad.json()["detail"]


async def test_search_ranks_tools_by_the_query_words(system: System) -> None:
    client = system.client()
    forecast = await create_tool(system, FORECAST, tags=["weather"])
    await create_tool(system, STOCKS.replace("stock_quote", "stock_price"))
    found = await asyncio.to_thread(client.tools.search, query="weather forecast", limit=5)
    assert found[0].tool.id == forecast["id"]
    assert found[0].fts_rank == 1 and found[0].vector_rank is None
    assert [r.combined_score for r in found] == sorted(
        (r.combined_score for r in found), reverse=True
    )
    assert all(r.combined_score > 0 for r in found)
    # Filters apply before ranking; a query no tool shares a word with finds nothing.
    only_builtin = await asyncio.to_thread(
        client.tools.search, query="weather memory", tool_types=["letta_core"]
    )
    assert only_builtin and {r.tool.tool_type for r in only_builtin} == {"letta_core"}
    assert await asyncio.to_thread(client.tools.search, query="zzzqqq") == []
    tagged = await asyncio.to_thread(client.tools.search, tags=["weather"])
    assert [r.tool.id for r in tagged] == [forecast["id"]]


async def test_add_base_tools_lists_the_built_in_tools(system: System) -> None:
    response = await system.http.post("/v1/tools/add-base-tools")
    assert response.status_code == 200, response.text
    assert sorted(t["name"] for t in response.json()) == sorted(SCHEMAS)
    assert all(t["tool_type"].startswith("letta_") for t in response.json())


async def test_run_from_source_runs_in_the_sandbox_without_registering(system: System) -> None:
    before = (await count(system)).json()
    response = await system.http.post(
        "/v1/tools/run",
        json={"source_code": FORECAST, "args": {"city": "Oslo", "days": 3}},
        headers={"Idempotency-Key": "run-forecast-1"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["message_type"] == "tool_return_message"
    assert body["name"] == "forecast_weather"
    assert (body["status"], body["tool_return"]) == ("success", "Rain in Oslo for 3 days")
    assert body["stdout"] == ["forecasting Oslo"]
    assert body["tool_returns"][0]["tool_call_id"] == body["tool_call_id"]
    assert (await count(system)).json() == before  # nothing registered

    # A retry under the same key is answered from the recorded outcome: it ran once.
    again = await system.http.post(
        "/v1/tools/run",
        json={"source_code": FORECAST, "args": {"city": "Oslo", "days": 3}},
        headers={"Idempotency-Key": "run-forecast-1"},
    )
    assert again.status_code == 200, again.text
    assert (again.json()["tool_call_id"], again.json()["id"]) == (
        body["tool_call_id"],
        body["id"],
    )
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        outcomes = await event_types(nc, subjects.tool_execution_subject(body["tool_call_id"]))
    finally:
        await nc.close()
    assert [t for _, t in outcomes] == ["ToolExecutionStarted", "ToolExecuted"]


async def test_run_from_source_with_env_vars_and_failures(system: System) -> None:
    keyed = await system.http.post(
        "/v1/tools/run",
        json={"source_code": KEYED, "args": {"word": "hi"}, "env_vars": {"SERVICE_KEY": "s-9"}},
    )
    assert keyed.status_code == 200, keyed.text
    assert keyed.json()["tool_return"] == "hi:s-9"
    failed = await system.http.post(
        "/v1/tools/run", json={"source_code": FAILING, "args": {"a": 1, "b": 0}}
    )
    assert failed.status_code == 200, failed.text
    assert failed.json()["status"] == "error"
    assert "ZeroDivisionError" in failed.json()["tool_return"]
    # Several functions: `name` picks one; a name the source lacks, or source that does
    # not parse, is refused before anything runs.
    both = FAILING + STOCKS
    picked = await system.http.post(
        "/v1/tools/run",
        json={"source_code": both, "args": {"a": 6, "b": 3}, "name": "divide"},
    )
    assert picked.json()["tool_return"] == "2.0"
    cases = [
        ({"source_code": both, "args": {}, "name": "nope"}, "no function named 'nope'"),
        ({"source_code": "def f(:\n  pass", "args": {}}, "does not parse"),
        ({"source_code": "x = 1", "args": {}}, "no top-level function"),
        ({"source_code": STOCKS, "args": {}, "source_type": "typescript"}, "Python tools only"),
        (
            {"source_code": STOCKS, "args": {}, "npm_requirements": [{"name": "lodash"}]},
            "npm_requirements",
        ),
    ]
    for payload, detail in cases:
        response = await system.http.post("/v1/tools/run", json=payload)
        assert response.status_code == 400, (payload, response.text)
        assert detail in response.json()["detail"]
    missing_args = await system.http.post("/v1/tools/run", json={"source_code": STOCKS})
    assert missing_args.status_code == 422


async def test_generate_schema_from_source(system: System) -> None:
    response = await system.http.post("/v1/tools/generate-schema", json={"code": FORECAST})
    assert response.status_code == 200, response.text
    assert response.json() == {
        "name": "forecast_weather",
        "description": "Forecast the weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city to forecast."},
                "days": {"type": "integer", "description": "How many days ahead."},
            },
            "required": ["city"],
        },
    }
    bad = await system.http.post("/v1/tools/generate-schema", json={"code": "def f(:"})
    assert bad.status_code == 400
    typescript = await system.http.post(
        "/v1/tools/generate-schema", json={"code": "function f() {}", "source_type": "typescript"}
    )
    assert typescript.status_code == 400


async def test_run_an_agents_tool_by_name(system: System) -> None:
    client = system.client()
    keyed = await create_tool(system, KEYED)
    agent = await new_agent(system, tool_ids=[keyed["id"]], secrets={"SERVICE_KEY": "agent-k"})
    result = await asyncio.to_thread(
        client.agents.tools.run, "keyed", agent_id=agent["id"], args={"word": "yo"}
    )
    assert (result.status, result.func_return) == ("success", "yo:agent-k")

    # A memory tool edits the agent's block through the memory service.
    names = [t["name"] for t in agent["tools"]]
    memory = next(n for n in ("memory_insert", "core_memory_append") if n in names)
    args: dict[str, Any] = (
        {"label": "human", "new_string": "Likes tea."}
        if memory == "memory_insert"
        else {"label": "human", "content": "Likes tea."}
    )
    edited = await asyncio.to_thread(
        client.agents.tools.run, memory, agent_id=agent["id"], args=args
    )
    assert edited.status == "success", edited
    human = await system.http.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human")
    assert "Likes tea." in human.json()["value"]

    # A built-in tool that means something only within a turn is refused.
    in_turn = next(n for n in names if n in SCHEMAS and n not in MEMORY_TOOLS)
    with pytest.raises(BadRequestError, match="runs only within an agent's turn"):
        await asyncio.to_thread(client.agents.tools.run, in_turn, agent_id=agent["id"], args={})
    with pytest.raises(NotFoundError):
        await asyncio.to_thread(client.agents.tools.run, "stock_quote", agent_id=agent["id"])
