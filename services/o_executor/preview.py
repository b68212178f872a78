"""What a run's first model call would send its provider, built and not sent
(POST /v1/agents/{id}/messages/preview-raw-payload and the conversation's; Letta's
"preview model request").

The agent loop itself runs, on the agent as it is now and the request's messages, with
dependencies that read the agent's blocks and record nothing: its first question to the
model is caught and the run stops there. So the preview is the prompt a run would compile
(system prompt with memory, tool rules and folders, the history, the new messages, the tools
the rules allow, the model's settings), in the provider's own request shape. If the context
would first have to be summarized, the summarizer's request is the first one, and shown.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from o_contracts.base import Event
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.events import RunCompleted, RunStarted, RunSteerRequested
from o_contracts.models import ToolCall
from o_contracts.requests import RunPreviewed
from o_executor import images, llm
from o_executor.live.deps import read_core
from o_executor.providers import UnknownProvider
from o_executor.run import RunInputs, evolution_tools, run_agent, versions
from o_executor.run.deps import ModelRequest, Reflection, ToolOutcome
from o_executor.run.system_prompts import SystemPrompts
from o_memory.core_memory import CoreMemory

if TYPE_CHECKING:
    from o_executor.service import ExecutorService

PRODUCER = "executor-preview"


class ModelAsked(Exception):
    """The run's first question to the model (the preview's answer)."""

    def __init__(self, request: ModelRequest) -> None:
        super().__init__("the model was asked")
        self.request = request


class NotPreviewable(Exception):
    """The run would act before asking the model (answers to pending tool calls run
    their tools first): nothing to preview without doing it."""


class PreviewDeps:
    """RunDeps that read the agent's blocks and record, publish and run nothing."""

    def __init__(
        self, core: Callable[[], Awaitable[CoreMemory]], prompts: SystemPrompts | None = None
    ) -> None:
        self._core = core
        # The executor's: a preview shows the prompt the conversation's next step sends.
        self.prompts = prompts if prompts is not None else SystemPrompts()
        self._seq = 0
        self.completed: RunCompleted | None = None

    def start(self, event: RunStarted) -> None:
        pass

    async def started(self) -> bool:
        return True

    async def record(self, event: Event, key: str, *, even_if_gone: bool = False) -> int:
        if isinstance(event, RunCompleted):
            self.completed = event
        self._seq += 1
        return self._seq

    def cancelled(self) -> bool:
        return False

    async def steering(self) -> list[RunSteerRequested]:
        return []

    async def core_memory(self) -> CoreMemory:
        return await self._core()

    async def complete(self, request: ModelRequest, *, cancellable: bool = True) -> llm.LLMResult:
        raise ModelAsked(request)

    async def publish(self, delta: dict[str, Any]) -> None:
        pass

    async def run_tool(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        raise NotPreviewable(
            f"the run would first run '{call.name}' (an answer to a pending tool call):"
            " a preview sends new messages only"
        )

    async def resolve_in_doubt(self, call: ToolCall, requested_seq: int) -> ToolOutcome | None:
        return None

    async def reflect(self, agent_id: str) -> Reflection:
        raise NotPreviewable("a sleep-time reflection is not previewed")


async def first_request(inputs: RunInputs, deps: PreviewDeps) -> ModelRequest:
    """The run's first question to the model. Raises NotPreviewable when it would end, or
    act, before asking one."""
    try:
        outcome = await run_agent(inputs, deps)
    except ModelAsked as asked:
        return asked.request
    ended = deps.completed
    reason = ended.stop_reason if ended is not None else getattr(outcome, "error", "")
    error = f" ({ended.error})" if ended is not None and ended.error else ""
    raise NotPreviewable(f"the run would end before asking the model: {reason}{error}")


async def preview_run(service: ExecutorService, cmd: StartRun) -> RunPreviewed:
    """The preview of `cmd` on its agent as the executor's reads see it now."""
    agent = await service.load_agent(cmd.agent_id)
    if agent is None:
        return RunPreviewed(ok=False, status=404, error=f"Agent {cmd.agent_id} not found")
    # (The canary arm the run would take under this id; the evolution tools it would have.)
    agent = versions.served(agent, cmd.run_id, cmd.conversation_id, None)
    agent = evolution_tools.granted(agent, service.config.evolution_enabled)
    history = await service.load_history(cmd.lane, exclude_run=cmd.run_id)
    deps = PreviewDeps(
        lambda: read_core(service, cmd.agent_id, 0, cmd.isolated_block_ids), service.prompts
    )
    command = Envelope.wrap(cmd, aggregate_id=cmd.agent_id, producer=PRODUCER)
    try:
        asked = await first_request(RunInputs(command, agent, history), deps)
        payload = await llm.request_body(
            asked.handle,
            await images.as_sent(service.eventlog.images, asked.messages),
            asked.tools,
            stream=asked.stream,
            settings=asked.settings,
            force_tool=asked.force_tool,
        )
    except NotPreviewable as exc:
        return RunPreviewed(ok=False, status=422, error=str(exc))
    except UnknownProvider as exc:
        return RunPreviewed(ok=False, status=404, error=str(exc))
    return RunPreviewed(ok=True, payload=payload)
