"""What the loop needs from the world, as one narrow interface.

The loop decides; everything it reads or changes outside itself goes through
RunDeps. The live implementation (o_executor/live) records facts on the log,
asks the LLM, runs tools through the memory service and the sandbox. The
shadow implementation (o_executor/shadow) runs the same loop on a snapshot
taken from the log, with every write kept in an overlay that is thrown away
and nothing published.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from o_contracts.base import Event
from o_contracts.events import RunStarted, RunSteerRequested
from o_contracts.models import ToolCall, Usage
from o_executor.llm import LLMResult
from o_executor.model_settings import DEFAULTS, ModelSettings
from o_executor.providers import Handle
from o_executor.run.system_prompts import SystemPrompts
from o_memory.core_memory import CoreMemory

OnText = Callable[[str], Awaitable[None]]
OnToolCall = Callable[[str, str | None, str], Awaitable[None]]


@dataclass(frozen=True)
class ModelRequest:
    handle: Handle
    # The conversation as the provider's chat API takes it (system message first).
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    stream: bool = False
    force_tool: bool = False
    # The agent's model settings; a summary asks with none (plain text, defaults).
    settings: ModelSettings = DEFAULTS
    # Streamed pieces, for clients that follow the run token by token.
    on_text: OnText | None = None
    on_tool_call: OnToolCall | None = None
    # The step this call is for: its exchange with the provider is kept as the step's
    # trace where traces are kept (live runs: o_executor/provider_traces.py).
    step_id: str | None = None


@dataclass
class ToolOutcome:
    ok: bool
    text: str
    ends_turn: bool = False
    stdout: list[str] | None = None
    stderr: list[str] | None = None


@dataclass(frozen=True)
class Reflection:
    """What a sleep-time reflection came to (the memory service drew the insights)."""

    ok: bool
    insights: int = 0
    usage: Usage = field(default_factory=Usage)
    error: str | None = None


class RunCancelled(Exception):
    """The run was cancelled while its LLM call was in flight (the answer is not recorded)."""


class AgentGone(Exception):
    """The agent was deleted while the run was going."""


class RunDeps(Protocol):
    # The system prompts kept per conversation (system_prompts.py).
    prompts: SystemPrompts

    def start(self, event: RunStarted) -> None:
        """Record the run's start without waiting; every later record follows it."""

    async def started(self) -> bool:
        """Wait for the start to be recorded (if it was being recorded); whether it is.

        Raises what recording it raised (AgentGone, EventTooLarge).
        """

    async def record(self, event: Event, key: str, *, even_if_gone: bool = False) -> int:
        """Record a fact of this run before it is acted on; its position in the log.

        `key` names the fact within the run (a repeated record of it is the same
        fact). Raises AgentGone (unless `even_if_gone`) and EventTooLarge.
        """

    def cancelled(self) -> bool:
        """Whether the run has been asked to stop (checked between steps)."""

    async def steering(self) -> list[RunSteerRequested]:
        """Requests to steer this run known so far, in the order they came (steering.py
        leaves out those it took)."""

    async def core_memory(self) -> CoreMemory:
        """The agent's blocks and archival summary as they are now (after this run's edits)."""

    async def complete(self, request: ModelRequest, *, cancellable: bool = True) -> LLMResult:
        """Ask the model; RunCancelled if the run is cancelled meanwhile (when cancellable)."""

    async def publish(self, delta: dict[str, Any]) -> None:
        """A streamed piece for clients that follow the run token by token."""

    async def run_tool(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        """Run a tool the agent has (memory, archival, recall or a user's) with `args`."""

    async def resolve_in_doubt(self, call: ToolCall, requested_seq: int) -> ToolOutcome | None:
        """A call requested before a crash with no recorded result: its outcome if it can be
        found out, or None when running it again is safe (o_executor/live/tools.py says
        which); then the loop runs it as a first call."""

    async def reflect(self, agent_id: str) -> Reflection:
        """Have the memory service reflect on `agent_id`'s memories (a sleep-time run);
        asked again after a crash, it is answered from the memory service's record."""
