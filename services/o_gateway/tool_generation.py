"""Writing a tool with a model (POST /v1/tools/generate-tool): what is asked, and what
the answer must be before a client gets it. Pure: the call itself is model_calls.py's.

As Letta's route: the model is asked, by a forced call of a tool whose parameters are
the answer's fields, for the function's source, sample arguments and pip requirements,
each as text; the source must then give a tool schema exactly as `generate-schema`
derives one (it parses, defines a function, has a docstring describing every
parameter), or the request is refused with 400 and the reason, so a client can ask again
with it in `validation_errors`. An answer that is not what was asked (arguments that are
not JSON, sample arguments that are not an object) is the model's failure: 502.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from typing import Any

from o_gateway.tool_schema import ToolSourceError, derive_schema

# Letta's default model for this route (its DEFAULT_GENERATE_TOOL_MODEL_HANDLE).
DEFAULT_HANDLE = "openai/gpt-4.1"
MAX_SOURCE_CHARS = 200_000

SYSTEM_PROMPT = """\
You write tools for AI agents: each tool is one Python function an agent calls.

Write it so that it can be registered as it is:
- one top-level function with the requested name (helper functions may come before it);
- every parameter has a type annotation (str, int, float, bool, list, dict, or Optional
  of these) and the function returns a str or another JSON-serialisable value;
- a Google-style docstring: a first line saying what the tool does, an `Args:` section
  describing every parameter, and a `Returns:` section;
- the standard library where it is enough, imported inside the function; list any other
  package in pip_requirements_json.

Answer only by calling the function you are given, with:
- raw_source_code: the complete Python source;
- sample_args_json: a JSON object of example arguments, by parameter name, to try it;
- pip_requirements_json: a JSON object of package name to version ("" for any), {} if none.
"""

# The forced call's parameters: the answer's fields, each a string (models write JSON
# inside a string more reliably than free-form nested objects).
RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "raw_source_code": {
            "type": "string",
            "description": "The complete Python source of the tool.",
        },
        "sample_args_json": {
            "type": "string",
            "description": "A JSON object of example arguments, by parameter name.",
        },
        "pip_requirements_json": {
            "type": "string",
            "description": "A JSON object of pip package name to version; {} if none.",
        },
    },
    "required": ["raw_source_code", "sample_args_json", "pip_requirements_json"],
}


class BadAnswer(ValueError):
    """The model's answer is not what was asked for (502: the model's failure)."""


@dataclass(frozen=True)
class GeneratedTool:
    source_code: str
    sample_args: dict[str, Any]
    pip_requirements: list[dict[str, str | None]]


def user_prompt(
    tool_name: str, prompt: str, starter_code: str | None, validation_errors: list[str]
) -> str:
    parts = [f"Write a Python tool: a function named `{tool_name}`."]
    if starter_code:
        parts.append(f"Start from this code:\n\n```python\n{starter_code}\n```")
    if validation_errors:
        listed = "\n".join(f"- {e}" for e in validation_errors)
        parts.append(f"A previous version was refused for these reasons; avoid them:\n{listed}")
    parts.append(f"What the tool must do: {prompt}")
    return "\n\n".join(parts)


def read_answer(arguments: str) -> GeneratedTool:
    """The forced call's arguments as a tool to check (BadAnswer if they are not)."""
    try:
        answer = json.loads(arguments)
    except ValueError as exc:
        raise BadAnswer(f"the model's answer is not JSON: {exc}") from exc
    if not isinstance(answer, dict):
        raise BadAnswer("the model's answer is not a JSON object")
    source = answer.get("raw_source_code")
    if not isinstance(source, str) or not source.strip():
        raise BadAnswer("the model's answer has no raw_source_code")
    if len(source) > MAX_SOURCE_CHARS:
        raise BadAnswer(f"the model's source is over {MAX_SOURCE_CHARS} characters")
    samples = _json_object(answer.get("sample_args_json"), "sample_args_json")
    requirements = _json_object(answer.get("pip_requirements_json"), "pip_requirements_json")
    return GeneratedTool(
        source_code=source,
        sample_args=samples,
        pip_requirements=[
            {"name": str(name), "version": str(version) if version else None}
            for name, version in requirements.items()
        ],
    )


def _json_object(value: Any, name: str) -> dict[str, Any]:
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, dict):  # (some models send the object itself)
        return value
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except ValueError as exc:
        raise BadAnswer(f"the model's {name} is not JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise BadAnswer(f"the model's {name} is not a JSON object")
    return parsed


def tool_schema(tool_name: str, source_code: str) -> dict[str, Any]:
    """The schema `generate-schema` gives the source: of the function named `tool_name`
    when there is one, else of the last (as Letta derives it from the source alone).
    ToolSourceError says why there is none."""
    try:
        tree = ast.parse(source_code)
    except SyntaxError as exc:
        raise ToolSourceError(f"source_code does not parse: {exc.msg} (line {exc.lineno})") from exc
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    return derive_schema(source_code, tool_name if tool_name in names else None)


def render_tool(
    tool_id: str, name: str, generated: GeneratedTool, schema: dict[str, Any]
) -> dict[str, Any]:
    """Letta's Tool, not registered (a client creates it if it wants it)."""
    return {
        "id": tool_id,
        "tool_type": "custom",
        "description": schema.get("description"),
        "source_type": "python",
        "name": name,
        "tags": [],
        "source_code": generated.source_code,
        "json_schema": schema,
        "args_json_schema": None,
        "return_char_limit": 50000,
        "pip_requirements": generated.pip_requirements,
        "npm_requirements": None,
        "default_requires_approval": None,
        "enable_parallel_execution": False,
        "created_by_id": None,
        "last_updated_by_id": None,
        "metadata_": {},
        "project_id": None,
    }
