"""What the log already holds for a run: the facts a resumed run must not redo.

A run that is picked up again (after its executor was killed, or by another
replica) replays the agent's subject from where the previous run finished and
collects its own events. Recorded LLM steps are used instead of asking again,
recorded tool results instead of running the tool again; a tool call that was
requested but has no result is "in doubt" and is resolved from the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from o_contracts.base import Message
from o_contracts.envelope import MalformedMessage, decode
from o_contracts.events import (
    ContextSummarized,
    LLMResponded,
    RunCompleted,
    RunStarted,
    RunSteered,
    RunSteerRequested,
    ToolCallRequested,
    ToolReturned,
    facts,
)
from o_runtime.eventlog import EventLog


@dataclass
class RunLog:
    started: RunStarted | None = None
    started_seq: int = 0
    steps: dict[int, LLMResponded] = field(default_factory=dict)
    # tool_call_id -> (event, its stream sequence)
    requested: dict[str, tuple[ToolCallRequested, int]] = field(default_factory=dict)
    returned: dict[str, ToolReturned] = field(default_factory=dict)
    summaries: dict[int, ContextSummarized] = field(default_factory=dict)
    completed: RunCompleted | None = None
    completed_seq: int = 0
    # Requests to steer the run, by their own run's id, and what it took, by step.
    steer_requests: dict[str, RunSteerRequested] = field(default_factory=dict)
    steered: dict[int, RunSteered] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.started is None

    @classmethod
    async def read(cls, eventlog: EventLog, subject: str, run_id: str, since: int) -> RunLog:
        """The run's events on `subject` (its conversation's) after `since`."""
        found = cls()
        async for raw in eventlog.replay(subject, start_seq=since + 1):
            try:
                event = decode(raw.data).data
            except MalformedMessage:
                continue
            if getattr(event, "run_id", None) != run_id:
                continue
            for fact in facts(event):
                found.add(fact, raw.seq)
        return found

    def add(self, fact: Message, seq: int) -> None:
        """Take one fact of the run (read through `facts`) at its position in the log."""
        if isinstance(fact, RunStarted):
            self.started, self.started_seq = fact, seq
        elif isinstance(fact, LLMResponded):
            self.steps[fact.step_number] = fact
        elif isinstance(fact, ToolCallRequested):
            self.requested[fact.tool_call_id] = (fact, seq)
        elif isinstance(fact, ToolReturned):
            if fact.message.tool_call_id:
                self.returned[fact.message.tool_call_id] = fact
        elif isinstance(fact, ContextSummarized):
            self.summaries[fact.step_number] = fact
        elif isinstance(fact, RunCompleted):
            self.completed, self.completed_seq = fact, seq
        elif isinstance(fact, RunSteerRequested):
            self.steer_requests.setdefault(fact.steer_run_id, fact)
        elif isinstance(fact, RunSteered):
            self.steered[fact.step_number] = fact
