"""Letta's built-in `run_code` and `run_code_with_tools`, run in O's own tool sandbox.

Letta runs them in E2B's hosted sandbox (and fails without an E2B key); O runs the code
as it runs users' tools: in the tool sandbox, confined (no network, limits, a uid of its
own: docs/sandbox.md), as a `RunTool` whose source is the small runner below. So only
Python runs (Letta's other languages are refused with the reason). The answer is Letta's
(E2B's) shape: `{"results": [...], "logs": {"stdout": [...], "stderr": [...]}}`, with
`"error": {"name", "value", "traceback"}` when the code raised. `results` holds the
value of the code's last line when it is an expression (as a notebook cell shows it).
`run_code_with_tools` runs the code after the sources of the agent's own Python tools,
so the code can call them by name.
"""

from __future__ import annotations

import json
from typing import Any

from o_contracts.envelope import Envelope
from o_contracts.ids import derived_id
from o_executor.run.agent import AgentConfig, UserTool
from o_executor.run.deps import ToolOutcome
from o_executor.sandbox_calls import run_user_tool

LANGUAGES = ("python", "js", "ts", "r", "java")

# The runner, defined in the sandbox beside the tools' sources (for run_code_with_tools):
# it runs the code in a namespace holding what the module defines, and reports what the
# code raised as part of the answer, as E2B does. (Its names start with `_o_` to stay out
# of the code's way.)
RUNNER = """
def _o_run(code, scope):
    import ast, json, traceback
    out = {"results": []}
    try:
        tree = ast.parse(code, "<code>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        namespace = {k: v for k, v in scope.items() if not k.startswith("_o_")}
        namespace["__name__"] = "__main__"
        exec(compile(tree, "<code>", "exec"), namespace)
        if last is not None:
            value = eval(compile(last, "<code>", "eval"), namespace)
            if value is not None:
                out["results"].append(repr(value))
    except BaseException as exc:
        out["error"] = {
            "name": type(exc).__name__,
            "value": str(exc),
            "traceback": traceback.format_exc(),
        }
    return json.dumps(out)


def run_code(code, language="python"):
    return _o_run(code, globals())


def run_code_with_tools(code):
    return _o_run(code, globals())
"""


class CodeRefused(ValueError):
    """The call cannot be run; the message says why (for the model)."""


def checked_code(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """The arguments the runner is called with (pure)."""
    code = args.get("code")
    if not isinstance(code, str):
        raise CodeRefused("code must be a string of Python")
    if name == "run_code_with_tools":
        return {"code": code}
    language = args.get("language", "python")
    if language not in LANGUAGES:
        raise CodeRefused(f"language must be one of: {', '.join(LANGUAGES)}")
    if language != "python":
        raise CodeRefused(
            f"this server runs Python only (in its tool sandbox), not {language}:"
            " write the code in Python"
        )
    return {"code": code}


def source_for(name: str, tools: list[UserTool]) -> str:
    """The module the sandbox runs: for run_code_with_tools, the agent's Python tools
    first, so the code can call them (pure)."""
    if name == "run_code":
        return RUNNER
    return "\n\n".join([*(t.source_code for t in tools if t.mcp is None), RUNNER])


def answer(result: dict[str, Any]) -> ToolOutcome:
    """The sandbox's outcome as Letta's answer: the runner's results (and error) with the
    code's output lines (pure)."""
    if result.get("status") != "success":
        return ToolOutcome(False, str(result.get("tool_return", "")))
    try:
        ran: dict[str, Any] = json.loads(str(result.get("tool_return")))
    except ValueError:
        return ToolOutcome(False, f"the code's runner answered oddly: {result.get('tool_return')}")
    logs = {"stdout": list(result.get("stdout") or []), "stderr": list(result.get("stderr") or [])}
    out: dict[str, Any] = {"results": ran.get("results", []), "logs": logs}
    if "error" in ran:
        out["error"] = ran["error"]
    return ToolOutcome(True, json.dumps(out, ensure_ascii=False))


async def run_code_tool(
    name: str,
    args: dict[str, Any],
    *,
    eventlog: Any,  # o_runtime.eventlog.EventLog
    cause: Envelope[Any],
    agent: AgentConfig,
    run_id: str,
    tool_call_id: str,
    producer: str,
    timeout: float,
) -> ToolOutcome:
    try:
        arguments = checked_code(name, args)
    except CodeRefused as exc:
        return ToolOutcome(False, str(exc))
    python_tools = [t for t in agent.user_tools.values() if t.mcp is None]
    runner = UserTool(
        id=derived_id("tool", "builtin", name),
        name=name,
        source_code=source_for(name, python_tools),
        json_schema={},
        return_char_limit=50_000,
        # Confined code cannot act outside the sandbox: running it again is harmless,
        # unless one of the agent's own tools it may call says otherwise.
        idempotent=name == "run_code" or all(t.idempotent for t in python_tools),
        # The packages of the agent's tools it may call.
        requirements=tuple({r for t in python_tools for r in t.requirements}),
    )
    result = await run_user_tool(
        eventlog,
        cause,
        agent=agent,
        tool=runner,
        run_id=run_id,
        tool_call_id=tool_call_id,
        arguments=arguments,
        producer=producer,
        timeout=timeout,
    )
    return answer(result)
