"""What a run is made of: its inputs (read before it starts) and its state (what a replay
of its recorded events rebuilds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.events import ContextSummarized, LLMResponded
from o_contracts.models import ChatMessage, Usage
from o_contracts.tool_rules import ToolRuleSolver
from o_executor.run.agent import AgentConfig
from o_executor.run_log import RunLog
from o_executor.tokens import Calibrated


@dataclass(frozen=True)
class RunInputs:
    """Everything the run reads before its first step."""

    command: Envelope[StartRun]
    agent: AgentConfig
    # The agent's in-context messages before this run, in order.
    history: list[ChatMessage]
    # What the log already holds of this run (a resumed run goes on from it).
    recorded: RunLog = field(default_factory=RunLog)
    # The log knew the run before this delivery (queued, or started): it ends
    # with a RunCompleted whatever happens, so it never stays created or running.
    known: bool = False

    @property
    def cmd(self) -> StartRun:
        return self.command.data


@dataclass
class RunState:
    usage: Usage = field(default_factory=Usage)
    # Steps taken (what RunCompleted records).
    steps: int = 0
    rules: ToolRuleSolver = field(default_factory=lambda: ToolRuleSolver([]))
    # Tools the client runs itself (this request's), by name.
    client_tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Token estimates calibrated by what the provider reported.
    tokens: Calibrated = field(default_factory=Calibrated)
    # A forced summary's outcome (POST .../summarize answers with it).
    summary: ContextSummarized | None = None
    # Where this run's own messages begin in the context (summaries never cut there).
    run_start: int = 0
    # The steering requests (their runs' ids) this run has taken (steering.py).
    steered: set[str] = field(default_factory=set)
    # The answer that ended the run, asked in this delivery and not yet recorded: it
    # rides in the run's RunCompleted (run/loop.py).
    final_answer: LLMResponded | None = None
