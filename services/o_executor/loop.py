"""The agent loop for one run: compile context, call the LLM, run tools, record everything.

Every fact is appended to the agent's subject before it is acted on: the
LLM's response before its tool calls run, each tool's result before the next
step. Event and message ids derive from the run id, so a redelivered command
re-appends nothing (the stream deduplicates them).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack

from o_contracts import subjects
from o_contracts.base import Event, Reply
from o_contracts.base_tools import ARCHIVAL_TOOLS, MEMORY_TOOLS, openai_tools
from o_contracts.commands import InsertPassage, RunMemoryTool, StartRun
from o_contracts.envelope import Envelope
from o_contracts.events import LLMResponded, RunCompleted, RunStarted, ToolReturned
from o_contracts.ids import derived_id
from o_contracts.models import ChatMessage, ToolCall, Usage
from o_contracts.prompts import default_system
from o_executor import llm, recall
from o_executor.archival_calls import ArchivalCallError, insert_passage, search_passages
from o_executor.context import compile_system
from o_executor.providers import Handle, UnknownProvider
from o_runtime.commands import CommandTimeout, send_and_wait
from o_runtime.eventlog import ConcurrencyConflict
from o_runtime.tracing import tracer

if TYPE_CHECKING:
    from o_executor.service import ExecutorService

log = logging.getLogger(__name__)
PRODUCER = "executor"


@dataclass
class ToolOutcome:
    ok: bool
    text: str
    ends_turn: bool = False


class AgentGone(Exception):
    pass


class AgentRun:
    def __init__(self, service: ExecutorService, command: Envelope[Any]) -> None:
        self.s = service
        self.command = command
        self.cmd: StartRun = command.data
        self.subject = subjects.agent_subject(self.cmd.agent_id)
        self.last = 0
        self.memory_seq = 0
        self.usage = Usage()
        self.steps = 0

    async def _append(self, event: Event, key: str) -> int:
        envelope = self.command.caused(
            event,
            aggregate_id=self.cmd.agent_id,
            producer=PRODUCER,
            id=derived_id("evt", self.cmd.run_id, key),
        )
        for _ in range(10):
            try:
                appended = await self.s.eventlog.append(self.subject, envelope, self.last)
            except ConcurrencyConflict:
                # Someone else wrote to the agent (a PATCH): the run is still
                # valid as long as the agent exists.
                self.last = await self.s.eventlog.last_seq(self.subject)
                await self.s.watcher.wait(self.last, "agents")
                if await self.s.load_agent(self.cmd.agent_id) is None:
                    raise AgentGone(self.cmd.agent_id) from None
                continue
            self.last = max(self.last, appended.seq)
            return appended.seq
        raise RuntimeError(f"could not append to {self.subject}: too many conflicts")

    async def execute(self) -> Reply:
        agent = await self.s.load_agent(self.cmd.agent_id)
        if agent is None:
            return Reply(ok=False, status=404, error=f"agent {self.cmd.agent_id} not found")
        self.last = await self.s.eventlog.last_seq(self.subject)
        await self.s.watcher.wait(self.last, "runs")
        history = await self.s.load_history(self.cmd.agent_id)
        try:
            await self._append(
                RunStarted(
                    run_id=self.cmd.run_id,
                    agent_id=self.cmd.agent_id,
                    messages=self.cmd.messages,
                    max_steps=self.cmd.max_steps,
                ),
                "started",
            )
            messages = history + list(self.cmd.messages)
            stop_reason, error = await self._steps(agent, messages)
            seq = await self._append(
                RunCompleted(
                    run_id=self.cmd.run_id,
                    agent_id=self.cmd.agent_id,
                    stop_reason=stop_reason,
                    usage=self.usage,
                    step_count=self.steps,
                    error=error,
                ),
                "completed",
            )
        except AgentGone:
            return Reply(ok=False, status=404, error=f"agent {self.cmd.agent_id} was deleted")
        return Reply(ok=True, seq=seq, result={"stop_reason": stop_reason})

    async def _steps(
        self, agent: dict[str, Any], messages: list[ChatMessage]
    ) -> tuple[str, str | None]:
        try:
            handle = Handle.parse(agent["llm_config"].get("handle") or "")
        except UnknownProvider as exc:
            return "error", str(exc)
        tools = openai_tools(agent["tools"])
        for step in range(self.cmd.max_steps):
            self.steps = step + 1
            step_id = derived_id("step", self.cmd.run_id, str(step))
            system = await self._system_prompt(agent, len(messages))
            try:
                with tracer.start_as_current_span(f"llm {handle}", attributes={"step": step}):
                    result = await llm.complete(
                        handle,
                        [{"role": "system", "content": system}, *llm.to_openai_messages(messages)],
                        tools,
                        stream=self.cmd.stream_tokens,
                    )
            except (llm.LLMError, UnknownProvider) as exc:
                log.warning("run %s: LLM call failed: %s", self.cmd.run_id, exc)
                return "llm_api_error", str(exc)
            reply = ChatMessage(
                id=derived_id("message", self.cmd.run_id, str(step), "assistant"),
                role="assistant",
                content=result.content,
                tool_calls=result.tool_calls,
            )
            self.usage = self.usage + result.usage
            await self._append(
                LLMResponded(
                    run_id=self.cmd.run_id,
                    agent_id=self.cmd.agent_id,
                    step_id=step_id,
                    step_number=step,
                    message=reply,
                    usage=result.usage,
                    model=str(handle),
                    finish_reason=result.finish_reason,
                ),
                f"llm-{step}",
            )
            messages.append(reply)
            if not reply.tool_calls:
                return "end_turn", None
            ends_turn = False
            for call in reply.tool_calls:
                outcome = await self._run_tool(agent, call)
                tool_msg = ChatMessage(
                    id=derived_id("message", self.cmd.run_id, str(step), call.id),
                    role="tool",
                    name=call.name,
                    tool_call_id=call.id,
                    content=outcome.text,
                    status="success" if outcome.ok else "error",
                )
                await self._append(
                    ToolReturned(
                        run_id=self.cmd.run_id,
                        agent_id=self.cmd.agent_id,
                        step_id=step_id,
                        message=tool_msg,
                    ),
                    f"tool-{step}-{call.id}",
                )
                messages.append(tool_msg)
                ends_turn = ends_turn or outcome.ends_turn
            if ends_turn:
                return "end_turn", None
        return "max_steps", None

    async def _system_prompt(self, agent: dict[str, Any], recall_count: int) -> str:
        request = msgpack.packb(
            {"agent_id": self.cmd.agent_id, "min_seq": self.memory_seq}, use_bin_type=True
        )
        response = await self.s.eventlog.nc.request(subjects.MEMORY_READ_CORE, request, timeout=10)
        blocks = msgpack.unpackb(response.data, raw=False)
        return compile_system(
            agent["system"] or default_system(agent["agent_type"]),
            self.cmd.agent_id,
            blocks,
            recall_count,
        )

    async def _run_tool(self, agent: dict[str, Any], call: ToolCall) -> ToolOutcome:
        if call.name not in agent["tools"]:
            return ToolOutcome(False, f"tool '{call.name}' is not available to this agent")
        try:
            args = json.loads(call.arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments are not a JSON object")
        except ValueError as exc:
            return ToolOutcome(False, f"invalid arguments for {call.name}: {exc}")
        if call.name == "send_message":
            return ToolOutcome(True, "None", ends_turn=True)
        if call.name == "conversation_search":
            return await self._conversation_search(args)
        if call.name in MEMORY_TOOLS:
            return await self._memory_tool(call, args)
        if call.name in ARCHIVAL_TOOLS:
            return await self._archival_tool(call, args)
        return ToolOutcome(False, f"tool '{call.name}' cannot be run yet")

    async def _memory_tool(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        command = self.command.caused(
            RunMemoryTool(
                agent_id=self.cmd.agent_id,
                run_id=self.cmd.run_id,
                tool_call_id=call.id,
                tool_name=call.name,
                arguments=args,
            ),
            aggregate_id=self.cmd.agent_id,
            producer=PRODUCER,
            id=derived_id("cmd", self.cmd.run_id, call.id),
        )
        try:
            reply = await send_and_wait(
                self.s.eventlog, subjects.memory_command_subject(self.cmd.agent_id), command
            )
        except CommandTimeout as exc:
            return ToolOutcome(False, f"memory service did not answer: {exc}")
        if reply.seq:
            self.memory_seq = max(self.memory_seq, reply.seq)
        if not reply.ok:
            return ToolOutcome(False, reply.error or "memory edit failed")
        return ToolOutcome(True, str((reply.result or {}).get("message", "OK")))

    async def _archival_tool(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        try:
            if call.name == "archival_memory_insert":
                command = self.command.caused(
                    InsertPassage(
                        **insert_passage(self.cmd.agent_id, self.cmd.run_id, call.id, args)
                    ),
                    aggregate_id=self.cmd.agent_id,
                    producer=PRODUCER,
                    id=derived_id("cmd", self.cmd.run_id, call.id),
                )
                reply = await send_and_wait(
                    self.s.eventlog, subjects.memory_command_subject(self.cmd.agent_id), command
                )
                if not reply.ok:
                    return ToolOutcome(False, reply.error or "archival insert failed")
                return ToolOutcome(True, "Memory inserted into archival memory.")
            found = await search_passages(self.s.eventlog.nc, self.cmd.agent_id, args)
        except ArchivalCallError as exc:
            return ToolOutcome(False, str(exc))
        except CommandTimeout as exc:
            return ToolOutcome(False, f"memory service did not answer: {exc}")
        return ToolOutcome(True, json.dumps(found) if found else "No results found.")

    async def _conversation_search(self, args: dict[str, Any]) -> ToolOutcome:
        try:
            found = await recall.search(self.s.pool, self.cmd.agent_id, args)
        except recall.RecallError as exc:
            return ToolOutcome(False, str(exc))
        return ToolOutcome(True, recall.render(found))
