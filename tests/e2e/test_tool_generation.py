"""POST /v1/tools/generate-tool: a tool written by the model O is configured with (the
scripted OpenAI-protocol server here), checked as generate-schema checks source and
answered in Letta's shape without registering anything; source that gives no schema is
refused with Letta's 400, and the reason can go back in `validation_errors`.

letta-client has no call for it: raw HTTP, as Letta's own tests use.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import System
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

CONVERT = '''
def celsius_to_fahrenheit(celsius: float) -> float:
    """Convert a temperature from Celsius to Fahrenheit.

    Args:
        celsius: The temperature in degrees Celsius.

    Returns:
        The temperature in degrees Fahrenheit.
    """
    return celsius * 9 / 5 + 32
'''

BROKEN = "def celsius_to_fahrenheit(celsius: float -> float:\n    return celsius\n"


def written(source: str, samples: str = '{"celsius": 100}', pip: str = "{}") -> Reply:
    arguments = {
        "raw_source_code": source,
        "sample_args_json": samples,
        "pip_requirements_json": pip,
    }
    return Reply(tool_calls=[("structured_response", arguments)])


async def generate(system: System, **body: Any) -> Any:
    request = {
        "tool_name": "celsius_to_fahrenheit",
        "prompt": "Convert Celsius to Fahrenheit.",
        "validation_errors": [],
        **body,
    }
    return await system.http.post("/v1/tools/generate-tool", json=request)


async def test_a_tool_is_written_by_the_model_and_answered_unregistered(
    system: System, llm: FakeOpenAI
) -> None:
    llm.push(written(CONVERT, pip='{"numpy": "2.1.0"}'))
    response = await generate(system, starter_code="def celsius_to_fahrenheit(c): pass")
    assert response.status_code == 200, response.text
    body = response.json()
    tool = body["tool"]
    schema = await system.http.post("/v1/tools/generate-schema", json={"code": CONVERT})
    assert tool["json_schema"] == schema.json()
    assert (tool["name"], tool["source_code"], tool["tool_type"]) == (
        "celsius_to_fahrenheit",
        CONVERT,
        "custom",
    )
    assert tool["pip_requirements"] == [{"name": "numpy", "version": "2.1.0"}]
    assert (body["sample_args"], body["response"]) == ({"celsius": 100}, "")
    # Asked of Letta's default model with the answer as a forced call.
    (request,) = llm.requests
    assert request["model"] == "gpt-4.1"
    assert request["tool_choice"] == "required"
    parameters = request["tools"][0]["function"]["parameters"]
    assert parameters["required"] == [
        "raw_source_code",
        "sample_args_json",
        "pip_requirements_json",
    ]
    system_message, user_message = request["messages"]
    assert system_message["role"] == "system" and "Args:" in system_message["content"]
    assert "a function named `celsius_to_fahrenheit`" in user_message["content"]
    assert "def celsius_to_fahrenheit(c): pass" in user_message["content"]
    # Nothing registered.
    listed = await system.http.get("/v1/tools/", params={"name": "celsius_to_fahrenheit"})
    assert listed.json() == []


async def test_source_without_a_schema_is_refused_and_its_reason_can_be_sent_back(
    system: System, llm: FakeOpenAI
) -> None:
    llm.push(written(BROKEN))
    refused = await generate(system, handle="openai/gpt-4o-mini")
    assert refused.status_code == 400, refused.text
    reason = refused.json()["detail"]
    assert reason.startswith(
        "Failed to generate JSON schema for tool 'celsius_to_fahrenheit':"
        " source_code does not parse"
    )
    assert llm.requests[-1]["model"] == "gpt-4o-mini"
    llm.push(written(CONVERT))
    again = await generate(system, validation_errors=[reason])
    assert again.status_code == 200, again.text
    assert f"- {reason}" in llm.requests[-1]["messages"][1]["content"]
    llm.push(written("def celsius_to_fahrenheit(c: float) -> float:\n    return c\n"))
    undocumented = await generate(system)
    assert undocumented.status_code == 400
    assert "docstring" in undocumented.json()["detail"]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (Reply(content="Here is your tool: ..."), "no structured response"),
        (written(CONVERT, samples="celsius=100"), "sample_args_json is not JSON"),
        (Reply(tool_calls=[("structured_response", "{oops")]), "not JSON"),
    ],
)
async def test_an_answer_that_is_not_a_tool_is_a_bad_gateway(
    system: System, llm: FakeOpenAI, reply: Reply, reason: str
) -> None:
    llm.push(reply)
    response = await generate(system)
    assert response.status_code == 502, response.text
    assert reason in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"handle": "nowhere/model-x"}, 404),
        ({"validation_errors": None}, 422),
        ({"tool_name": "not a name"}, 422),
        ({"prompt": ""}, 422),
    ],
)
async def test_bad_requests_are_refused_before_the_model_is_asked(
    system: System, llm: FakeOpenAI, body: dict[str, Any], status: int
) -> None:
    request = {"tool_name": "f", "prompt": "p", "validation_errors": [], **body}
    request = {k: v for k, v in request.items() if v is not None}
    response = await system.http.post("/v1/tools/generate-tool", json=request)
    assert response.status_code == status, response.text
    assert "detail" in json.loads(response.text)
    assert llm.requests == []
