"""The loop's dependencies in the shadow: a snapshot from the log, an overlay that keeps
every write of the run (thrown away with it), nothing published, no tool with effects run.

- Records go to the overlay (checked against the log's size limit like live ones).
- Core memory is the snapshot's, with the run's memory edits applied in the overlay by the
  memory service's own rules (o_memory/tools.py: the same code decides live edits).
- The model is given (a recorded one to replay a run; a live one to try a candidate).
- Other tools are answered by `other_tools`: recorded results when replaying; otherwise a
  call that is not run in the shadow says so.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from o_contracts.base import Event
from o_contracts.base_tools import MEMORY_TOOLS
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.events import BlockUpdated, RunStarted, RunSteerRequested
from o_contracts.events.blocks import ValueEdit
from o_contracts.ids import derived_id
from o_contracts.limits import NATS_MAX_PAYLOAD
from o_contracts.models import ToolCall
from o_executor.llm import LLMResult
from o_executor.run.deps import ModelRequest, Reflection, ToolOutcome
from o_executor.run.system_prompts import SystemPrompts
from o_executor.shadow.snapshot import Snapshot
from o_memory.core_memory import CoreMemory
from o_memory.tools import BlockView, MemoryToolError, apply_edit
from o_runtime.eventlog import HEADERS_ROOM, EventTooLarge

PRODUCER = "executor-shadow"

Model = Callable[[ModelRequest], Awaitable[LLMResult]]
OtherTools = Callable[[ToolCall, dict[str, Any]], Awaitable[ToolOutcome]]


async def not_run(call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(False, f"'{call.name}' is not run in a shadow run (it may have effects)")


@dataclass
class Overlay:
    """Everything a shadow run wrote, in order; nothing of it leaves the run."""

    # The run's own events, as they would have been appended to the agent's subject.
    events: list[Envelope[Any]] = field(default_factory=list)
    # What other services would have recorded for it (the memory service's block edits).
    side_events: list[Event] = field(default_factory=list)
    # Token pieces a live run would have published.
    published: list[dict[str, Any]] = field(default_factory=list)


class ShadowDeps:
    def __init__(
        self,
        snapshot: Snapshot,
        command: Envelope[StartRun],
        model: Model,
        other_tools: OtherTools = not_run,
    ) -> None:
        self.snapshot = snapshot
        self.command = command
        self.model = model
        self.other_tools = other_tools
        self.overlay = Overlay()
        # (Its own: a shadow run's steps keep their prompt as a live run's do.)
        self.prompts = SystemPrompts()
        self.blocks = copy.deepcopy(snapshot.blocks)
        self._seq = snapshot.seq

    # -- recording --------------------------------------------------------------

    def start(self, event: RunStarted) -> None:
        self._append(event, "started")

    async def started(self) -> bool:
        return True

    async def record(self, event: Event, key: str, *, even_if_gone: bool = False) -> int:
        return self._append(event, key)

    def _append(self, event: Event, key: str) -> int:
        envelope = self.command.caused(
            event,
            aggregate_id=self.command.data.agent_id,
            producer=PRODUCER,
            id=derived_id("evt", self.command.data.run_id, key),
        )
        size = len(envelope.encode())
        if size > NATS_MAX_PAYLOAD - HEADERS_ROOM:
            # (as the live log would refuse it: the run ends the same way)
            raise EventTooLarge("shadow", envelope.type, size, NATS_MAX_PAYLOAD - HEADERS_ROOM)
        self.overlay.events.append(envelope)
        self._seq += 1
        return self._seq

    def cancelled(self) -> bool:
        return False

    async def steering(self) -> list[RunSteerRequested]:
        # Nobody steers a shadow run; a replay takes what the recorded run took, at the
        # same steps (RunInputs.recorded.steered).
        return []

    # -- reading ------------------------------------------------------------------

    async def core_memory(self) -> CoreMemory:
        core = self.snapshot.core_memory()
        core["blocks"] = copy.deepcopy(self.blocks)
        return core

    # -- the model ----------------------------------------------------------------

    async def complete(self, request: ModelRequest, *, cancellable: bool = True) -> LLMResult:
        return await self.model(request)

    async def publish(self, delta: dict[str, Any]) -> None:
        self.overlay.published.append(delta)

    # -- tools --------------------------------------------------------------------

    async def run_tool(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        if call.name in MEMORY_TOOLS:
            return self._memory_tool(call, args)
        return await self.other_tools(call, args)

    async def resolve_in_doubt(self, call: ToolCall, requested_seq: int) -> ToolOutcome | None:
        return None  # nothing of a shadow run is ever in doubt: run it (in the overlay)

    async def reflect(self, agent_id: str) -> Reflection:
        # A reflection writes archival memory through the memory service, which a shadow
        # run must never do; shadow runs replay conversations, not sleep-time runs.
        return Reflection(False, error="a shadow run does not reflect")

    def _memory_tool(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        """What the memory service decides for a memory tool call (o_memory/handlers.py)."""
        if call.name == "memory_finish_edits":
            return ToolOutcome(True, "Memory edits finished.")
        label = args.get("label")
        if not isinstance(label, str) or not label:
            return ToolOutcome(False, "missing required argument 'label'")
        block = next((b for b in self.blocks if b["label"] == label), None)
        if block is None:
            return ToolOutcome(False, f"no memory block labelled '{label}' for this agent")
        view = BlockView(block["label"], block["value"], block["limit"], block["read_only"])
        try:
            value = apply_edit(call.name, view, args)
        except MemoryToolError as exc:
            return ToolOutcome(False, str(exc))
        self.overlay.side_events.append(
            BlockUpdated(
                block_id=block["id"],
                version=block["version"] + 1,
                changes={},
                value_edit=ValueEdit.between(block["value"], value),
                actor="agent",
                agent_id=self.command.data.agent_id,
                tool_name=call.name,
            )
        )
        block["value"], block["version"] = value, block["version"] + 1
        return ToolOutcome(True, f"The core memory block with label `{label}` has been edited.")
