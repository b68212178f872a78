"""Running a run's tool calls in the live system: memory and archival tools through the
memory service, users' tools in the sandbox, `conversation_search` on the executor's own
messages projection, the web tools here (o_executor/web), the multi-agent tools as other
agents' runs. A memory edit requested before a crash but with no recorded result is looked
up in the block log rather than run twice."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from o_contracts import subjects
from o_contracts.base_tools import (
    ARCHIVAL_TOOLS,
    CODE_TOOLS,
    EVOLUTION_TOOLS,
    FILE_TOOLS,
    MEMORY_TOOLS,
    MULTI_AGENT_TOOLS,
    WEB_TOOLS,
)
from o_contracts.commands import InsertPassage, ReflectOnMemories, RunMemoryTool, StartRun
from o_contracts.envelope import Envelope, MalformedMessage, decode
from o_contracts.evolution_commands import RunEvolutionTool
from o_contracts.ids import derived_id
from o_contracts.models import ToolCall, Usage
from o_contracts.projection_names import MCP_SERVERS
from o_executor import file_calls, recall
from o_executor.archival_calls import ArchivalCallError, insert_passage, search_passages
from o_executor.code_runs import run_code_tool
from o_executor.mcp_calls import run_mcp_tool
from o_executor.multi_agent.runs import OtherRuns
from o_executor.multi_agent.tools import MultiAgentTools
from o_executor.run.agent import AgentConfig
from o_executor.run.deps import Reflection, ToolOutcome
from o_executor.run.policy import PURE_TOOLS
from o_executor.run.tool_step import memory_command_id
from o_executor.sandbox_calls import run_user_tool
from o_executor.settings import ExecutorSettings
from o_executor.web.tools import run_web_tool
from o_runtime import mcp_oauth
from o_runtime.commands import CommandTimeout, send_and_wait
from o_runtime.eventlog import EventLog
from o_runtime.mcp_stdio_relay import NatsStdioRelay
from o_runtime.reads import ProjectionReads

PRODUCER = "executor"
# How long a recorded token refresh may take to show in the registry's projection.
REGISTRY_WAIT = 10.0
MEMORY_CONSUMER = "memory"
IN_DOUBT_TIMEOUT = 30.0
# A memory command unanswered this long is sent again (a replica that died
# with it in hand would answer only after its consumer's ack_wait): the
# memory service answers a repeat from its record. An archival insert may
# wait for an embedding and an importance rating, so it is given longer.
MEMORY_RESEND = 3.0
# A proposal or rollback asked by the agent is decided (not evaluated) within this.
EVOLUTION_TIMEOUT = 60.0
ARCHIVAL_RESEND = 15.0
MEMORY_TIMEOUT = 60.0
# A reflection asks the model about up to a hundred memories and embeds the insights.
REFLECTION_TIMEOUT = 180.0


@dataclass
class LiveTools:
    eventlog: EventLog
    pool: Any  # asyncpg.Pool
    command: Envelope[StartRun]
    agent: AgentConfig
    settings: ExecutorSettings
    reads: ProjectionReads
    # Set when the run is asked to stop: a multi-agent tool stops waiting for a reply.
    cancel_requested: asyncio.Event
    # The highest log position of a memory edit this run made: the next prompt
    # reads core memory as of there (o_executor/live/deps.py).
    memory_seq: int = 0
    _in_doubt_retry: dict[str, str] = field(default_factory=dict)

    @property
    def cmd(self) -> StartRun:
        return self.command.data

    async def run_tool(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        if call.name == "conversation_search":
            return await self._conversation_search(args)
        if call.name in MEMORY_TOOLS:
            return await self._memory_tool(call, args)
        if call.name in EVOLUTION_TOOLS:
            return await self._evolution_tool(call, args)
        if call.name in FILE_TOOLS and call.name in self.agent.tools:
            return await self._file_tool(call, args)
        if call.name in WEB_TOOLS and call.name in self.agent.tools:
            return await run_web_tool(
                call.name,
                args,
                self.settings.web,
                self.agent.encrypted_secrets,
                self.settings.tool_timeout,
            )
        if call.name in CODE_TOOLS and call.name in self.agent.tools:
            return await run_code_tool(
                call.name,
                args,
                eventlog=self.eventlog,
                cause=self.command,
                agent=self.agent,
                run_id=self.cmd.run_id,
                tool_call_id=call.id,
                producer=PRODUCER,
                timeout=self.settings.tool_timeout,
            )
        if call.name in MULTI_AGENT_TOOLS:
            runs = OtherRuns(self.eventlog, self.pool, self.reads, self.command)
            tools = MultiAgentTools(runs, self.settings.agent_reply_timeout, self.cancel_requested)
            return await tools.run(call, args)
        user_tool = self.agent.user_tools.get(call.name)
        if user_tool is not None and user_tool.mcp is not None:
            # (An OAuth server's tokens: the newest its address has, read at the call.)
            oauth = await mcp_oauth.signed_in(
                self.pool, self.eventlog, PRODUCER, user_tool.mcp.url, self._registry_shows
            )
            return await run_mcp_tool(
                user_tool.mcp,
                user_tool.name,
                args,
                self.settings.tool_timeout,
                NatsStdioRelay(self.eventlog.nc),
                oauth,
            )
        if user_tool is not None:
            result = await run_user_tool(
                self.eventlog,
                self.command,
                agent=self.agent,
                tool=user_tool,
                run_id=self.cmd.run_id,
                tool_call_id=call.id,
                arguments=args,
                producer=PRODUCER,
                timeout=self.settings.tool_timeout,
            )
            return ToolOutcome(
                result.get("status") == "success",
                str(result.get("tool_return", "")),
                stdout=list(result.get("stdout") or []),
                stderr=list(result.get("stderr") or []),
            )
        if call.name in ARCHIVAL_TOOLS:
            return await self._archival_tool(call, args)
        return ToolOutcome(False, f"tool '{call.name}' cannot be run yet")

    async def _registry_shows(self, seq: int) -> None:
        # (A refresh this run recorded: the next call, here or anywhere, starts from it.)
        await self.reads.watcher.wait(seq, MCP_SERVERS, timeout=REGISTRY_WAIT)

    async def _file_tool(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        """The files tools, by the memory service (o_executor/file_calls.py)."""
        # request_heartbeat is the loop's argument, not the tool's.
        args = {k: v for k, v in args.items() if k != "request_heartbeat"}
        if call.name == "open_files":
            return await file_calls.open_files(
                self.eventlog, self.command, self.cmd.agent_id, self.cmd.run_id, call.id, args
            )
        if call.name == "grep_files":
            return await file_calls.search_files(
                self.eventlog, self.cmd.agent_id, "grep_files", args
            )
        return await file_calls.search_files(
            self.eventlog, self.cmd.agent_id, "semantic_search_files", args
        )

    async def _evolution_tool(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        """Carried out by the evolution service, on the agent it concerns (the agent
        itself, or a companion's primary: o_executor/run/evolution_tools.py)."""
        target = self.agent.evolution_target
        if target is None:
            return ToolOutcome(False, f"tool '{call.name}' is not available: evolution is off")
        command = self.command.caused(
            RunEvolutionTool(
                agent_id=target,
                caller_agent_id=self.cmd.agent_id,
                run_id=self.cmd.run_id,
                tool_call_id=call.id,
                tool_name=call.name,
                arguments=args,
            ),
            aggregate_id=target,
            producer=PRODUCER,
            id=derived_id("cmd", self.cmd.run_id, call.id, "evolution-tool"),
        )
        try:
            reply = await send_and_wait(
                self.eventlog,
                subjects.evolution_command_subject(target),
                command,
                timeout=EVOLUTION_TIMEOUT,
                resend_every=MEMORY_RESEND,
            )
        except CommandTimeout as exc:
            return ToolOutcome(False, f"the evolution service did not answer: {exc}")
        if not reply.ok:
            return ToolOutcome(False, reply.error or f"{call.name} failed")
        return ToolOutcome(True, str((reply.result or {}).get("text", "")))

    def _memory_command(
        self, call: ToolCall, args: dict[str, Any], attempt: str = ""
    ) -> Envelope[RunMemoryTool]:
        return self.command.caused(
            RunMemoryTool(
                agent_id=self.cmd.agent_id,
                run_id=self.cmd.run_id,
                tool_call_id=call.id,
                tool_name=call.name,
                # request_heartbeat is the loop's argument, not the tool's.
                arguments={k: v for k, v in args.items() if k != "request_heartbeat"},
                isolated_block_ids=self.cmd.isolated_block_ids,
            ),
            aggregate_id=self.cmd.agent_id,
            producer=PRODUCER,
            id=memory_command_id(self.cmd.run_id, call.id, attempt),
        )

    async def _memory_tool(
        self, call: ToolCall, args: dict[str, Any], attempt: str = ""
    ) -> ToolOutcome:
        command = self._memory_command(call, args, attempt)
        try:
            reply = await send_and_wait(
                self.eventlog,
                subjects.memory_command_subject(self.cmd.agent_id),
                command,
                timeout=MEMORY_TIMEOUT,
                resend_every=MEMORY_RESEND,
            )
        except CommandTimeout as exc:
            return ToolOutcome(False, f"memory service did not answer: {exc}")
        if reply.seq:
            self.memory_seq = max(self.memory_seq, reply.seq)
        if not reply.ok:
            return ToolOutcome(False, reply.error or "memory edit failed")
        return ToolOutcome(True, str((reply.result or {}).get("message", "OK")))

    async def resolve_in_doubt(self, call: ToolCall, requested_seq: int) -> ToolOutcome | None:
        """A tool call that was requested before a crash but has no recorded result.

        None: it is safe to run it again (the loop does, as a first call).
        """
        tool = self.agent.user_tools.get(call.name)
        if tool is not None and tool.mcp is not None:
            # An MCP server keeps no record we could ask: it may have acted already.
            return ToolOutcome(
                False,
                f"the run was interrupted while the MCP tool '{call.name}' was running; it was"
                " not run again, and its outcome is unknown",
            )
        # Users' tools are safe to ask again: the sandbox command has the same id,
        # and the sandbox answers a repeat from its recorded outcome.
        if call.name in PURE_TOOLS or call.name not in self.agent.tools:
            return None
        if (
            call.name in MULTI_AGENT_TOOLS
            or call.name in EVOLUTION_TOOLS
            or call.name in FILE_TOOLS
            or call.name in CODE_TOOLS
            or call.name in ARCHIVAL_TOOLS
        ):
            # Safe to call again: an evolution tool's (or open_files', the code tools'
            # sandbox, or an archival insert's) command has an id derived from the call,
            # and the service answers a repeat from its record (an insert: the passage it
            # made, archival_handlers.py);
            # the other agents' runs have ids derived from this call,
            # so the runs it started are found (and waited for, or read back), never
            # started twice (o_executor/multi_agent/runs.py).
            return None
        if call.name not in MEMORY_TOOLS:
            # We cannot know whether it ran; running it again could do it twice.
            return ToolOutcome(
                False,
                f"the run was interrupted while '{call.name}' was running; it was not run"
                " again, and its outcome is unknown",
            )
        try:
            args = json.loads(call.arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments are not a JSON object")
        except ValueError:
            return None  # rejected before any effect
        done = ToolOutcome(
            True, f"The core memory block with label `{args.get('label')}` has been edited."
        )
        command = self._memory_command(call, args)
        effect_id = derived_id("evt", command.id)
        if await self._find_event(effect_id, requested_seq):
            return done
        # Not applied (yet). Send the same command again: if the stream still
        # holds the first one, this is deduplicated and we wait until the
        # memory service has handled it; if not, it was never sent.
        appended = await self.eventlog.send_command(
            subjects.memory_command_subject(self.cmd.agent_id), command
        )
        await self._memory_handled(appended.seq)
        if await self._find_event(effect_id, requested_seq):
            return done
        # Handled without an effect: it was rejected, which changed nothing, so
        # asking again (under a new id) is safe and tells the model why.
        return await self._memory_tool(call, args, attempt="in-doubt")

    async def reflect(self, agent_id: str) -> Reflection:
        command = self.command.caused(
            ReflectOnMemories(agent_id=agent_id, run_id=self.cmd.run_id),
            aggregate_id=agent_id,
            producer=PRODUCER,
            # Derived from the run: a resumed run asks the same question, answered once.
            id=derived_id("cmd", self.cmd.run_id, "reflect"),
        )
        try:
            reply = await send_and_wait(
                self.eventlog,
                subjects.memory_command_subject(agent_id),
                command,
                timeout=REFLECTION_TIMEOUT,
                resend_every=ARCHIVAL_RESEND,
            )
        except CommandTimeout as exc:
            return Reflection(False, error=f"memory service did not answer: {exc}")
        if not reply.ok:
            return Reflection(False, error=reply.error or "reflection failed")
        result = reply.result or {}
        return Reflection(
            True,
            insights=int(result.get("insights", 0)),
            usage=Usage.model_validate(result.get("usage") or {}),
        )

    async def _find_event(self, event_id: str, since: int) -> bool:
        async for raw in self.eventlog.replay(subjects.BLOCK_EVENTS, start_seq=since + 1):
            try:
                if decode(raw.data).id == event_id:
                    return True
            except MalformedMessage:
                continue
        return False

    async def _memory_handled(self, command_seq: int) -> None:
        """Wait until the memory service has acknowledged every command up to `command_seq`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + IN_DOUBT_TIMEOUT
        delay = 0.01
        while True:
            info = await self.eventlog.js.consumer_info(subjects.COMMANDS_STREAM, MEMORY_CONSUMER)
            floor = info.ack_floor.stream_seq if info.ack_floor else 0
            if (floor or 0) >= command_seq:
                return
            if loop.time() > deadline:
                raise TimeoutError(f"memory service has not handled command {command_seq}")
            # A rare recovery path: polling the consumer state is simplest here.
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

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
                    self.eventlog,
                    subjects.memory_command_subject(self.cmd.agent_id),
                    command,
                    timeout=MEMORY_TIMEOUT,
                    resend_every=ARCHIVAL_RESEND,
                )
                if not reply.ok:
                    return ToolOutcome(False, reply.error or "archival insert failed")
                return ToolOutcome(True, "Memory inserted into archival memory.")
            found = await search_passages(self.eventlog.nc, self.cmd.agent_id, args)
        except ArchivalCallError as exc:
            return ToolOutcome(False, str(exc))
        except CommandTimeout as exc:
            return ToolOutcome(False, f"memory service did not answer: {exc}")
        return ToolOutcome(True, json.dumps(found) if found else "No results found.")

    async def _conversation_search(self, args: dict[str, Any]) -> ToolOutcome:
        try:
            found = await recall.search(self.pool, self.cmd.agent_id, args)
        except recall.RecallError as exc:
            return ToolOutcome(False, str(exc))
        return ToolOutcome(True, recall.render(found))
