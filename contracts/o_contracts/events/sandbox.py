"""Tool executions, appended by the tool sandbox on `o.evt.sandbox.<execution_id>`.

One subject per execution (the id of the `RunTool` command that asked for it):
a redelivered command finds the outcome already recorded and answers with it
instead of running the tool again, and the expected-sequence check makes sure
one execution records one outcome. Secrets never appear here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from o_contracts.base import Event

FailureKind = Literal[
    "exception",
    "timeout",
    "cpu_limit",
    "memory_limit",
    "output_limit",
    "crashed",
    "interrupted",
    "expired",
    "refused",
    # Its pip_requirements could not be installed (the error says why).
    "packages",
]


class ToolExecutionStarted(Event):
    """A sandbox began running the tool. A redelivered command that finds this
    without an outcome knows an earlier attempt died mid-call."""

    execution_id: str
    agent_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    attempt: int = 1
    sandbox: str


class ToolExecuted(Event):
    """The tool returned; `tool_return` is its return value as text (truncated to its limit)."""

    execution_id: str
    agent_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    tool_return: str
    stdout: list[str] = Field(default_factory=list)
    stderr: list[str] = Field(default_factory=list)
    duration_ms: float
    attempt: int = 1
    sandbox: str


class ToolExecutionFailed(Event):
    """The tool raised, hit a limit, or its sandbox died; `error` says which for the model."""

    execution_id: str
    agent_id: str
    run_id: str
    tool_call_id: str
    tool_name: str
    failure: FailureKind
    error: str
    stdout: list[str] = Field(default_factory=list)
    stderr: list[str] = Field(default_factory=list)
    duration_ms: float = 0.0
    attempt: int = 1
    sandbox: str
