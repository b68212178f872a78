"""What POST /v1/tools/generate-tool asks a model and makes of its answer (pure): the
prompt carries the starter code and the reasons a previous try was refused; an answer
that is not what was asked is the model's failure; source is checked as generate-schema
checks it."""

from __future__ import annotations

import json

import pytest

from o_gateway.tool_generation import (
    BadAnswer,
    read_answer,
    render_tool,
    tool_schema,
    user_prompt,
)
from o_gateway.tool_schema import ToolSourceError, derive_schema

WEATHER = '''
def _clean(city: str) -> str:
    return city.strip()


def get_weather(city: str) -> str:
    """Tell the weather in a city.

    Args:
        city: The city.

    Returns:
        The weather.
    """
    return f"Sunny in {_clean(city)}"
'''


def answer(**fields: object) -> str:
    base = {
        "raw_source_code": WEATHER,
        "sample_args_json": '{"city": "Paris"}',
        "pip_requirements_json": "{}",
    }
    return json.dumps(base | fields)


def test_the_prompt_names_the_function_and_carries_starter_code_and_past_errors() -> None:
    prompt = user_prompt(
        "get_weather", "Say the weather.", "def get_weather(city): ...", ["no docstring"]
    )
    assert prompt.startswith("Write a Python tool: a function named `get_weather`.")
    assert "```python\ndef get_weather(city): ...\n```" in prompt
    assert "- no docstring" in prompt
    assert prompt.endswith("What the tool must do: Say the weather.")
    assert "Start from" not in user_prompt("f", "p", None, [])


def test_an_answer_gives_the_source_sample_arguments_and_requirements() -> None:
    got = read_answer(answer(pip_requirements_json='{"requests": "2.32.0", "rich": ""}'))
    assert got.source_code == WEATHER
    assert got.sample_args == {"city": "Paris"}
    assert got.pip_requirements == [
        {"name": "requests", "version": "2.32.0"},
        {"name": "rich", "version": None},
    ]
    assert read_answer(answer(pip_requirements_json="")).pip_requirements == []


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ("not json", "the model's answer is not JSON"),
        ("[1]", "not a JSON object"),
        (answer(raw_source_code="  "), "has no raw_source_code"),
        (answer(sample_args_json="{city"), "sample_args_json is not JSON"),
        (answer(sample_args_json="[1, 2]"), "sample_args_json is not a JSON object"),
        (answer(pip_requirements_json="3"), "pip_requirements_json is not a JSON object"),
    ],
)
def test_an_answer_that_is_not_what_was_asked_is_the_models_failure(
    arguments: str, reason: str
) -> None:
    with pytest.raises(BadAnswer, match=reason):
        read_answer(arguments)


def test_the_schema_is_the_named_functions_as_generate_schema_derives_it() -> None:
    assert tool_schema("get_weather", WEATHER) == derive_schema(WEATHER, "get_weather")
    # A source without the named function: the last one's, as Letta derives it.
    assert tool_schema("weather", WEATHER)["name"] == "get_weather"
    with pytest.raises(ToolSourceError, match="does not parse"):
        tool_schema("f", "def f(:\n")
    with pytest.raises(ToolSourceError, match="docstring"):
        tool_schema("f", "def f(x: int) -> int:\n    return x\n")


def test_the_tool_is_lettas_tool_shape_with_the_requested_name() -> None:
    got = read_answer(answer())
    schema = tool_schema("get_weather", got.source_code)
    tool = render_tool("tool-1", "get_weather", got, schema)
    assert (tool["id"], tool["name"], tool["tool_type"], tool["source_type"]) == (
        "tool-1",
        "get_weather",
        "custom",
        "python",
    )
    assert tool["json_schema"] == schema and tool["description"] == "Tell the weather in a city."
    assert tool["pip_requirements"] == [] and tool["metadata_"] == {}
