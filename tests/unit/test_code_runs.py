"""The code tools' pure parts (o_executor/code_runs.py): the arguments, the module the
sandbox runs, the runner itself (run here, in a namespace of its own), and the answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from o_executor.code_runs import RUNNER, CodeRefused, answer, checked_code, source_for
from o_executor.run.agent import UserTool


def run_here(source: str, name: str, code: str) -> dict[str, Any]:
    module: dict[str, Any] = {}
    exec(compile(source, "<tool>", "exec"), module)
    result: dict[str, Any] = json.loads(module[name](code))
    return result


def test_the_last_expression_is_the_result_and_statements_run_before_it() -> None:
    assert run_here(RUNNER, "run_code", "a = 2\nb = a * 21\nb") == {"results": ["42"]}
    assert run_here(RUNNER, "run_code", "x = 1") == {"results": []}
    assert run_here(RUNNER, "run_code", "None") == {"results": []}
    assert run_here(RUNNER, "run_code", "'text'") == {"results": ["'text'"]}


def test_what_the_code_raises_is_part_of_the_answer() -> None:
    raised = run_here(RUNNER, "run_code", "def f():\n    raise KeyError('k')\nf()")
    assert raised["results"] == [] and raised["error"]["name"] == "KeyError"
    assert "line 2" in raised["error"]["traceback"]
    broken = run_here(RUNNER, "run_code", "def (")
    assert broken["error"]["name"] == "SyntaxError"
    assert run_here(RUNNER, "run_code", "import sys\nsys.exit(3)")["error"]["name"] == "SystemExit"


def test_the_runner_stays_out_of_the_codes_way_and_tools_come_first() -> None:
    assert run_here(RUNNER, "run_code", "'_o_run' in dir()") == {"results": ["False"]}
    tool = UserTool("tool-1", "double", "def double(x):\n    return 2 * x\n", {}, 100, True)
    source = source_for("run_code_with_tools", [tool])
    assert source.index("def double") < source.index("def _o_run")
    assert run_here(source, "run_code_with_tools", "double(21)") == {"results": ["42"]}
    assert source_for("run_code", [tool]) == RUNNER


@pytest.mark.parametrize(
    ("name", "args", "reason"),
    [
        ("run_code", {"language": "python"}, "code must be a string"),
        ("run_code", {"code": "1", "language": "cobol"}, "language must be one of"),
        ("run_code", {"code": "1", "language": "r"}, "Python only"),
        ("run_code_with_tools", {"code": 3}, "code must be a string"),
    ],
)
def test_calls_that_cannot_run_say_why(name: str, args: dict[str, Any], reason: str) -> None:
    with pytest.raises(CodeRefused, match=reason):
        checked_code(name, args)
    assert checked_code("run_code", {"code": "1"}) == {"code": "1"}  # (python by default)


def test_the_answer_is_e2bs_shape_with_the_output_lines() -> None:
    outcome = answer(
        {
            "status": "success",
            "tool_return": json.dumps({"results": ["1"], "error": {"name": "E"}}),
            "stdout": ["out\n"],
            "stderr": ["warn\n"],
        }
    )
    assert outcome.ok
    assert json.loads(outcome.text) == {
        "results": ["1"],
        "logs": {"stdout": ["out\n"], "stderr": ["warn\n"]},
        "error": {"name": "E"},
    }
    failed = answer({"status": "error", "tool_return": "timed out after 30 s"})
    assert (failed.ok, failed.text) == (False, "timed out after 30 s")
