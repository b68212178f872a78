"""Letta's built-in `run_code` and `run_code_with_tools` through the official SDK, run in O's
own tool sandbox (Letta needs E2B's hosted one): the code's output, its last value, its
error, the agent's tools callable by name, and the sandbox's confinement.

The scripted model: a user message `tool:NAME {json}` calls NAME with those arguments; a
tool's result is answered `done`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.e2e.conftest import System
from tests.e2e.test_multi_agent import call, scripted, tool_return
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.e2e

ADD = '''
def add_numbers(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b
'''


def ran(system: System, agent_id: str, tool: str, **args: Any) -> tuple[str, Any]:
    message = tool_return(call(system.client(), agent_id, tool, **args))
    if message.status != "success":
        return message.status, message.tool_return
    return message.status, json.loads(message.tool_return)


async def test_code_runs_in_the_sandbox_with_lettas_answer(system: System, llm: FakeOpenAI) -> None:
    llm.default_reply = scripted()
    client = system.client()
    (tool,) = client.tools.list(name="run_code")
    assert tool.tool_type == "letta_builtin"
    agent = client.agents.create(model="openai/gpt-4o-mini", tools=["run_code"])
    status, answer = ran(
        system, agent.id, "run_code", code="x = 6 * 7\nprint('hello', x)\nx + 0", language="python"
    )
    assert status == "success", answer
    assert answer["results"] == ["42"] and "error" not in answer, answer
    assert "hello 42" in "".join(answer["logs"]["stdout"]), answer
    status, answer = ran(
        system, agent.id, "run_code", code="print('before')\n1 / 0", language="python"
    )
    assert status == "success", answer
    assert answer["error"]["name"] == "ZeroDivisionError" and answer["results"] == [], answer
    assert "division by zero" in answer["error"]["value"]
    assert "before" in "".join(answer["logs"]["stdout"])
    # Confined as users' tools are: no network.
    status, answer = ran(
        system,
        agent.id,
        "run_code",
        code="import socket\nsocket.create_connection(('127.0.0.1', 8283), timeout=2)",
        language="python",
    )
    assert status == "success" and answer["error"]["name"] in ("PermissionError", "OSError"), answer
    status, text = ran(system, agent.id, "run_code", code="console.log(1)", language="js")
    assert status == "error" and "Python only" in text, text


async def test_run_code_with_tools_calls_the_agents_tools(system: System, llm: FakeOpenAI) -> None:
    llm.default_reply = scripted()
    client = system.client()
    name = f"add_numbers_{uuid.uuid4().hex[:6]}"
    tool = client.tools.create(source_code=ADD.replace("add_numbers", name))
    agent = client.agents.create(
        model="openai/gpt-4o-mini", tools=["run_code_with_tools"], tool_ids=[tool.id]
    )
    status, answer = ran(
        system, agent.id, "run_code_with_tools", code=f"{name}(2, 3) * {name}(1, 1)"
    )
    assert (status, answer["results"]) == ("success", ["10"]), answer
    # Without the tools, the same code cannot see them.
    plain = client.agents.create(model="openai/gpt-4o-mini", tools=["run_code"])
    status, answer = ran(system, plain.id, "run_code", code=f"{name}(2, 3)", language="python")
    assert answer["error"]["name"] == "NameError", answer
