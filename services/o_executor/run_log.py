"""What the log already holds for a run: the facts a resumed run must not redo.

A run that is picked up again (after its executor was killed, or by another
replica) replays the agent's subject from where the previous run finished and
collects its own events. Recorded LLM steps are used instead of asking again,
recorded tool results instead of running the tool again; a tool call that was
requested but has no result is "in doubt" and is resolved from the log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
            if isinstance(event, RunStarted):
                found.started, found.started_seq = event, raw.seq
            elif isinstance(event, LLMResponded):
                found.steps[event.step_number] = event
            elif isinstance(event, ToolCallRequested):
                found.requested[event.tool_call_id] = (event, raw.seq)
            elif isinstance(event, ToolReturned):
                if event.message.tool_call_id:
                    found.returned[event.message.tool_call_id] = event
            elif isinstance(event, ContextSummarized):
                found.summaries[event.step_number] = event
            elif isinstance(event, RunCompleted):
                found.completed, found.completed_seq = event, raw.seq
            elif isinstance(event, RunSteerRequested):
                found.steer_requests.setdefault(event.steer_run_id, event)
            elif isinstance(event, RunSteered):
                found.steered[event.step_number] = event
        return found
