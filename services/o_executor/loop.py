"""The agent loop for one run: compile context, call the LLM, run tools, record everything.

Every fact is appended to the agent's subject before it is acted on: the
LLM's response before its tool calls run, a `ToolCallRequested` before a tool
with effects runs, each tool's result before the next step. A run that is
delivered again (its executor was killed, or another replica took over) reads
its own recorded events back from the log and goes on from there: a recorded
LLM step is not asked again and a recorded tool call is not run again.
Event and message ids derive from the run id, so a repeated append is also
deduplicated by the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgpack
from nats.aio.msg import Msg

from o_contracts import subjects
from o_contracts.base import Event, Reply
from o_contracts.base_tools import MEMORY_TOOLS, openai_tools
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope, MalformedMessage, decode, known_type
from o_contracts.events import (
    ContextSummarized,
    LLMResponded,
    RunCancellationRequested,
    RunCompleted,
    RunStarted,
    ToolCallRequested,
    ToolReturned,
)
from o_contracts.ids import derived_id
from o_contracts.models import ChatMessage, ToolCall, Usage
from o_contracts.prompts import default_system
from o_contracts.tool_rules import ToolRuleSolver
from o_executor import llm, tokens
from o_executor.context import compile_system
from o_executor.outputs import (
    MAX_SUMMARY_CHARS,
    MAX_TOOL_RETURN_CHARS,
    bounded,
    storable,
    storable_call,
    tool_output,
)
from o_executor.providers import Handle, UnknownProvider
from o_executor.run_log import RunLog
from o_executor.run_queue import Cursor
from o_executor.tool_calls import PRODUCER, PURE_TOOLS, ToolCalls
from o_runtime.commands import current_delivery
from o_runtime.core_memory import CoreMemory, read_core_memory
from o_runtime.eventlog import ConcurrencyConflict, EventTooLarge
from o_runtime.outages import is_outage
from o_runtime.tracing import tracer

if TYPE_CHECKING:
    from o_executor.service import ExecutorService

log = logging.getLogger(__name__)
# Only an executor running the run appends these; seeing one we did not write
# means another executor has the run.
EXECUTOR_EVENTS = (RunStarted, LLMResponded, ToolCallRequested, ToolReturned, RunCompleted)
# Agents whose tools carry `request_heartbeat` (Letta's memgpt loops).
HEARTBEAT_AGENTS = frozenset({"memgpt_agent", "memgpt_v2_agent"})
NON_USER_PREFIX = "[This is an automated system message hidden from the user] "
DEFAULT_WINDOW = 128000
# Past this share of the window, older turns are summarized down to KEEP_AFTER_SUMMARY.
SUMMARIZE_AT = 0.9
KEEP_AFTER_SUMMARY = 0.5
SUMMARIZER_PROMPT = (
    "You summarize the earlier part of a conversation between an AI agent and a user, so the"
    " agent can continue it without the full transcript. Keep facts about the user, decisions,"
    " open tasks and the results of tool calls. Write at most a few short paragraphs."
)
SUMMARY_PREFIX = (
    "Note: prior messages have been hidden from view due to conversation memory constraints."
    " The following is a summary of the previous messages:\n"
)
# A killed process may hold the projection's next event until its ack_wait ends.
PROJECTION_TIMEOUT = 60.0


def tool_schemas(
    names: list[str],
    allowed: set[str],
    heartbeat: bool,
    user_tools: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The tools the model may call now; memgpt agents' tools take `request_heartbeat`.

    `user_tools` (name -> tool row) are users' tools, run in the sandbox.
    """
    tools = openai_tools([n for n in names if n in allowed]) + [
        {"type": "function", "function": t["json_schema"]}
        for name, t in (user_tools or {}).items()
        if name in allowed
    ]
    if not heartbeat:
        return tools
    out = []
    for tool in tools:
        fn = tool["function"]
        if fn["name"] != "send_message":
            params = fn["parameters"]
            props = {
                **params["properties"],
                "request_heartbeat": {
                    "type": "boolean",
                    "description": "Request an immediate heartbeat after function execution."
                    " Set to true if you want to send a follow-up message or run a follow-up"
                    " function.",
                },
            }
            fn = {**fn, "parameters": {**params, "properties": props}}
        out.append({"type": "function", "function": fn})
    return out


def wants_heartbeat(call: ToolCall) -> bool:
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        return False
    return isinstance(args, dict) and args.get("request_heartbeat") is True


@dataclass(frozen=True)
class RunRecord:
    """What the log already holds of a run, as the runs projection shows it."""

    status: str
    stop_reason: str | None
    # The run's last event (its RunCompleted once it has one) and its RunStarted.
    last_seq: int
    started_seq: int | None

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None


@dataclass(frozen=True)
class RunState:
    """The run and its agent's history as of a log position (checked, o_runtime/reads.py)."""

    cancelled: bool
    history: list[ChatMessage]
    record: RunRecord | None


_RUN_RECORD = (
    "SELECT status, stop_reason, last_seq, started_seq, cancel_requested FROM runs WHERE id = $1"
)


class AgentGone(Exception):
    pass


class ContextOverflow(Exception):
    """The system prompt alone does not fit the model's context window."""


class RunCancelled(Exception):
    """The run was cancelled while its LLM call was in flight."""


class RunTakenOver(Exception):
    """Another executor appended events of this run meanwhile: it owns the run now."""


class AgentRun(ToolCalls):
    def __init__(self, service: ExecutorService, command: Envelope[Any]) -> None:
        self.s = service
        self.command = command
        self.cmd: StartRun = command.data
        self.subject = subjects.agent_subject(self.cmd.agent_id)
        self.last = 0
        self.memory_seq = 0
        self.usage = Usage()
        self.steps = 0
        self.cancelled = False
        self.rules = ToolRuleSolver([])
        self.client_tools: dict[str, dict[str, Any]] = {}
        self.tokens = tokens.Calibrated()
        self.summary: ContextSummarized | None = None
        # Where this run's own messages begin in the context (summaries never cut there).
        self.run_start = 0
        # Core memory read ahead for the first prompt, with the memory_seq it was read at.
        self._core: tuple[int, asyncio.Task[CoreMemory]] | None = None
        # The RunStarted append, in flight during the first LLM call.
        self._started: asyncio.Task[int] | None = None
        # The agent's row, read while the run waited for its turn.
        self._agent: asyncio.Task[dict[str, Any] | None] | None = None
        # The agent's state as of where this process saw its previous run end,
        # read while the run waited for its turn: (that position, the task).
        self._ahead: tuple[int, asyncio.Task[tuple[int, RunState]]] | None = None
        # Set when a RunCancellationRequested for this run is published.
        self._cancel_requested = asyncio.Event()
        # Where this delivery's RunStarted landed (0: not appended by it).
        self._started_seq = 0

    async def _append(self, event: Event, key: str, even_if_gone: bool = False) -> int:
        """Append an event of this run to the agent's subject (after its RunStarted).

        Raises AgentGone when the agent was deleted meanwhile, unless
        `even_if_gone` (the run's completion is recorded whatever happened).
        """
        if self._started is not None and key != "started":
            # Events of the run follow its RunStarted on the subject.
            started, self._started = self._started, None
            await started
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
                # Someone else wrote to the agent: a PATCH (the run is still
                # valid as long as the agent exists), a cancellation, or another
                # executor that took this run over (then it is theirs to finish).
                await self._read_news(self.last)
                self.last = await self.s.eventlog.last_seq(self.subject)
                if not even_if_gone and not await self._agent_exists():
                    raise AgentGone(self.cmd.agent_id) from None
                continue
            self.last = max(self.last, appended.seq)
            if key == "started":
                self._started_seq = appended.seq
            return appended.seq
        raise RuntimeError(f"could not append to {self.subject}: too many conflicts")

    async def _read_news(self, since: int) -> None:
        """What others appended to the agent after `since` that concerns this run."""
        async for raw in self.s.eventlog.replay(self.subject, start_seq=since + 1):
            try:
                event = decode(raw.data).data
            except MalformedMessage:
                continue
            if getattr(event, "run_id", None) != self.cmd.run_id:
                continue
            if isinstance(event, RunCancellationRequested):
                self.cancelled = True
            elif isinstance(event, EXECUTOR_EVENTS):
                raise RunTakenOver(self.cmd.run_id)

    async def execute(self) -> Reply:
        delivery = current_delivery.get(None)
        if delivery is None:  # called outside a command consumer: no ordering to keep
            reply = await self._execute(Cursor())
            await self._projected(reply)
            return reply
        queue = self.s.run_queue
        # Read the agent while we wait for our turn; if we had to wait (an
        # earlier run was going), it is read again once our turn comes.
        self._agent = asyncio.create_task(self.s.load_agent(self.cmd.agent_id))
        # Likewise the history, if this process finished the agent's previous
        # run: usually the cursor still says so once the turn is checked (and
        # _run uses this only if it does).
        written = queue.written(self.cmd.agent_id)
        if written is not None and not delivery.redelivered:
            self._ahead = (written.event_seq, asyncio.create_task(self._last_and_state(written)))
        try:
            cursor = await queue.wait_turn(self.cmd.agent_id, delivery.stream_seq)
        except BaseException:
            self._drop_reads_ahead()
            raise
        if cursor.waited:
            self._drop_reads_ahead()
        try:
            reply = await self._execute(cursor)
        except RunTakenOver:
            return Reply(ok=False, status=409, error=f"run {self.cmd.run_id} was taken over")
        except Exception as exc:
            if delivery.last_attempt and not is_outage(exc):
                # It will be dead-lettered: the agent's next run must not wait for it.
                # (An outage never dead-letters a run: it is tried again.)
                await queue.finish(self.cmd.agent_id, delivery.stream_seq, self.last)
            raise
        # Hand the agent's turn on while the run's events are projected.
        await asyncio.gather(
            queue.finish(
                self.cmd.agent_id, delivery.stream_seq, max(self.last, reply.seq or 0), cursor
            ),
            self._projected(reply),
        )
        return reply

    async def _last_and_state(self, cursor: Cursor) -> tuple[int, RunState]:
        last, state = await asyncio.gather(
            self.s.eventlog.last_seq(self.subject), self._state_at(cursor.event_seq)
        )
        return last, state

    def _drop_reads_ahead(self) -> None:
        if self._agent is not None:
            self._agent.cancel()
            self._agent = None
        if self._ahead is not None:
            self._ahead[1].cancel()
            self._ahead = None

    async def _projected(self, reply: Reply) -> None:
        # Like every O service: whoever waited for the reply reads its write.
        if reply.seq:
            await self.s.watcher.wait(reply.seq, "runs", timeout=PROJECTION_TIMEOUT)

    async def _execute(self, cursor: Cursor) -> Reply:
        # Every event appended to the agent's subject is also published on it:
        # a cancellation of this run interrupts an LLM call in flight (the log's
        # record of it is still what decides; see _read_news).
        watching = await self.s.eventlog.nc.subscribe(self.subject, cb=self._on_agent_event)
        try:
            return await self._run(cursor)
        finally:
            with contextlib.suppress(Exception):
                await watching.unsubscribe()
            self._drop_reads_ahead()
            if self._core is not None:  # read ahead but never used (the run ended early)
                self._core[1].cancel()
                self._core = None
            if self._started is not None:  # the run failed before appending anything else
                self._started.cancel()
                with contextlib.suppress(BaseException):
                    await self._started
                self._started = None

    async def _on_agent_event(self, msg: Msg) -> None:
        if known_type(msg.data) != RunCancellationRequested.type_name():
            return
        try:
            event = decode(msg.data).data
        except MalformedMessage:
            return
        if getattr(event, "run_id", None) == self.cmd.run_id:
            self.cancelled = True
            self._cancel_requested.set()

    async def _run(self, cursor: Cursor) -> Reply:
        # The first prompt's core memory, read while the run gets ready.
        self._core = (self.memory_seq, asyncio.create_task(self._read_core(self.memory_seq)))
        loading, self._agent = self._agent, None
        # The history is what the log held before this run began. Usually the
        # agent's subject is where its previous run left it (the run queue's
        # cursor says where): read the history as of there while checking.
        guess = cursor.event_seq
        ahead, self._ahead = self._ahead, None
        state: RunState | None
        if ahead is not None and ahead[0] == guess:
            agent, (self.last, state) = await asyncio.gather(
                loading or self.s.load_agent(self.cmd.agent_id), ahead[1]
            )
        else:
            if ahead is not None:
                ahead[1].cancel()
            (agent, self.last), state = await asyncio.gather(
                asyncio.gather(
                    loading or self.s.load_agent(self.cmd.agent_id),
                    self.s.eventlog.last_seq(self.subject),
                ),
                self._state_at(guess) if guess else asyncio.sleep(0, None),
            )
        if state is None or self.last != guess:
            state = await self._state_at(self.last)
        # Whatever brought this command (a redelivery after a lost ack, a
        # restart of NATS, someone publishing it again), the log decides: a
        # finished run is answered from its record and never run again, and a
        # started one goes on from its recorded facts.
        record = state.record
        if record is not None and record.finished:
            self.last = max(self.last, record.last_seq)
            return Reply(ok=True, seq=record.last_seq, result={"stop_reason": record.stop_reason})
        if agent is None and await self._agent_exists():
            agent = await self.s.load_agent(self.cmd.agent_id)  # (its projection was behind)
        if agent is None:
            return await self._agent_gone(recorded=record is not None)
        recorded = RunLog()
        if record is not None and record.status != "created":
            # (runs started before started_seq was projected: from the cursor)
            since = record.started_seq - 1 if record.started_seq else cursor.event_seq
            recorded = await RunLog.read(self.s.eventlog, self.cmd.agent_id, self.cmd.run_id, since)
            # Memory edits made before the crash must show in the next prompt.
            info = await self.s.eventlog.js.stream_info(subjects.EVENTS_STREAM)
            self.memory_seq = info.state.last_seq
        history = state.history
        self.cancelled = self.cancelled or state.cancelled  # (or seen published meanwhile)
        try:
            if recorded.started is None:
                # Appended while the first LLM call runs (every later append
                # waits for it): a crash before it lands leaves nothing recorded,
                # so the redelivered run starts afresh and asks the LLM again.
                self._started = asyncio.create_task(
                    self._append(
                        RunStarted(
                            run_id=self.cmd.run_id,
                            agent_id=self.cmd.agent_id,
                            messages=self.cmd.messages,
                            max_steps=self.cmd.max_steps,
                            approvals=self.cmd.approvals,
                            background=self.cmd.background,
                            request_config=self.cmd.request_config,
                        ),
                        "started",
                    )
                )
            messages = history + list(self.cmd.messages)
            self.run_start = len(history)
            try:
                if self.cmd.summarize:
                    stop_reason, error = await self._forced_summary(agent, messages, recorded)
                else:
                    stop_reason, error = await self._steps(agent, messages, recorded)
                if self._started is not None:  # (no step was recorded: it must land first)
                    starting, self._started = self._started, None
                    await starting
            except EventTooLarge as exc:
                # A fact too large for the log (an input sent over NATS, a model's
                # answer) ends the run with the reason; if not even its start could
                # be recorded, nothing was, and the caller is told.
                if record is None and recorded.started is None and not self._started_seq:
                    return Reply(ok=False, status=exc.status, error=exc.reason)
                stop_reason, error = "error", exc.reason
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
            started = record is not None or recorded.started is not None or self._started_seq > 0
            return await self._agent_gone(recorded=started)
        result: dict[str, Any] = {"stop_reason": stop_reason}
        if self.summary is not None:
            result |= {
                "summary": self.summary.summary.content,
                "num_messages_before": self.summary.messages_before,
                "num_messages_after": self.summary.messages_after,
            }
        return Reply(ok=True, seq=seq, result=result)

    async def _agent_exists(self) -> bool:
        """Whether the agent exists as of the subject's last event we know of (checked)."""
        async with self.s.reads.at(self.last, "agents", timeout=PROJECTION_TIMEOUT) as conn:
            return bool(
                await conn.fetchval("SELECT 1 FROM agents WHERE id = $1", self.cmd.agent_id)
            )

    async def _agent_gone(self, recorded: bool) -> Reply:
        """The agent was deleted before or during the run: the run ends, cancelled.

        A run the log knows (queued or started) gets its RunCompleted, so it
        never stays `created` or `running`; one it never heard of is a 404.
        """
        if not recorded:
            return Reply(ok=False, status=404, error=f"agent {self.cmd.agent_id} not found")
        seq = await self._append(
            RunCompleted(
                run_id=self.cmd.run_id,
                agent_id=self.cmd.agent_id,
                stop_reason="cancelled",
                usage=self.usage,
                step_count=self.steps,
                error=f"agent {self.cmd.agent_id} was deleted",
            ),
            "completed",
            even_if_gone=True,
        )
        return Reply(ok=True, seq=seq, result={"stop_reason": "cancelled"})

    async def _llm_step(
        self,
        agent: dict[str, Any],
        handle: Handle,
        tools: list[dict[str, Any]],
        messages: list[ChatMessage],
        step: int,
        step_id: str,
        force_tool: bool,
    ) -> ChatMessage:
        system = await self._system_prompt(agent, len(messages)) + self.rules.prompt()
        window = int(agent["llm_config"].get("context_window") or DEFAULT_WINDOW)
        family = llm.family(handle)
        if self.tokens(tokens.estimate_text(system, family)) > window:
            raise ContextOverflow(
                f"the system prompt (with memory blocks) needs about"
                f" {self.tokens(tokens.estimate_text(system, family))} tokens; the context"
                f" window of {handle} is {window}"
            )
        wire = llm.to_openai_messages(messages)
        estimated = tokens.estimate_request(system, wire, tools, family)
        if self.tokens(estimated) > SUMMARIZE_AT * window:
            if await self._summarize(agent, handle, messages, step, window):
                wire = llm.to_openai_messages(messages)
                estimated = tokens.estimate_request(system, wire, tools, family)
        reply_id = derived_id("message", self.cmd.run_id, str(step), "assistant")
        with tracer.start_as_current_span(f"llm {handle}", attributes={"step": step}):
            call = asyncio.create_task(
                llm.complete(
                    handle,
                    [{"role": "system", "content": system}, *wire],
                    tools,
                    stream=self.cmd.stream_tokens,
                    force_tool=force_tool,
                    max_tokens=agent["llm_config"].get("max_tokens"),
                    on_text=self._token_publisher(reply_id) if self.cmd.stream_tokens else None,
                    on_tool_call=(
                        self._tool_call_publisher(reply_id, agent)
                        if self.cmd.stream_tokens
                        else None
                    ),
                )
            )
            cancel = asyncio.create_task(self._cancel_requested.wait())
            await asyncio.wait({call, cancel}, return_when=asyncio.FIRST_COMPLETED)
            cancel.cancel()
            if not call.done():
                # Cancelled mid-call: the answer is abandoned, never recorded.
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
                raise RunCancelled(self.cmd.run_id)
            result = call.result()
        self.tokens.learn(estimated, result.usage.prompt_tokens)
        content = storable(result.content) if result.content is not None else None
        calls = [storable_call(c) for c in result.tool_calls]
        # Calls that need a person's approval, or that the client runs itself,
        # are not run: the turn stops and waits for their answers. The other
        # calls of the response are held and run with the answers (as in Letta).
        waiting = [
            c.id
            for c in calls
            if self.rules.requires_approval(c.name) or c.name in self.client_tools
        ]
        reply = ChatMessage(
            id=reply_id,
            role="assistant",
            content=content,
            tool_calls=calls,
            approval_request=True if waiting else None,
            approval_tool_call_ids=waiting or None,
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
        return reply

    def _token_publisher(self, message_id: str) -> llm.OnText:
        subject = subjects.run_tokens_subject(self.cmd.run_id)
        nc = self.s.eventlog.nc

        async def publish(text: str) -> None:
            await nc.publish(
                subject, msgpack.packb({"message_id": message_id, "text": text}, use_bin_type=True)
            )

        return publish

    def _tool_call_publisher(self, message_id: str, agent: dict[str, Any]) -> llm.OnToolCall:
        """Tool-call pieces as they stream, for calls a client sees as tool_call_message.

        Not streamed: calls that will wait for approval or for the client (they
        show as approval_request_message once recorded) and memgpt agents'
        send_message (shown as the assistant's text once recorded).
        """
        subject = subjects.run_tokens_subject(self.cmd.run_id)
        nc = self.s.eventlog.nc
        memgpt = agent["agent_type"] in HEARTBEAT_AGENTS
        streaming: set[str] = set()

        async def publish(call_id: str, name: str | None, arguments: str) -> None:
            if name is not None:
                hidden = (
                    self.rules.requires_approval(name)
                    or name in self.client_tools
                    or (memgpt and name == "send_message")
                )
                if not hidden:
                    streaming.add(call_id)
            if call_id not in streaming:
                return
            piece = {"id": call_id, "name": name, "arguments": arguments}
            await nc.publish(
                subject,
                msgpack.packb({"message_id": message_id, "tool_call": piece}, use_bin_type=True),
            )

        return publish

    async def _forced_summary(
        self, agent: dict[str, Any], messages: list[ChatMessage], recorded: RunLog
    ) -> tuple[str, str | None]:
        """POST .../summarize: summarize everything before the last turn, now."""
        self.steps = 0
        done = recorded.summaries.get(-1)
        if done is None:
            try:
                handle = Handle.parse(agent["llm_config"].get("handle") or "")
                window = int(agent["llm_config"].get("context_window") or DEFAULT_WINDOW)
                self.run_start = max(
                    (i for i, m in enumerate(messages) if m.role == "user"), default=0
                )
                done = await self._summarize(agent, handle, messages, -1, window, force=True)
            except (llm.LLMError, UnknownProvider) as exc:
                return "llm_api_error", str(exc)
        self.summary = done
        return "end_turn", None

    async def _steps(
        self, agent: dict[str, Any], messages: list[ChatMessage], recorded: RunLog
    ) -> tuple[str, str | None]:
        try:
            handle = Handle.parse(agent["llm_config"].get("handle") or "")
        except UnknownProvider as exc:
            return "error", str(exc)
        self.rules = ToolRuleSolver([dict(r) for r in agent.get("tool_rules") or []])
        self.client_tools = {
            str(t["name"]): {
                "name": t["name"],
                "description": t.get("description") or "",
                "parameters": t.get("parameters") or {"type": "object", "properties": {}},
            }
            for t in self.cmd.client_tools
            if t.get("name")
        }
        if self.cmd.approvals:
            messages += await self._answer_approvals(agent, messages, recorded)
        memgpt = agent["agent_type"] in HEARTBEAT_AGENTS
        # Tool rules apply to built-in and users' tools alike.
        available = set(agent["tools"]) | set(agent.get("user_tools", {}))
        last_output: str | None = None
        for step in range(self.cmd.max_steps):
            final = step == self.cmd.max_steps - 1
            self.steps = step + 1
            step_id = derived_id("step", self.cmd.run_id, str(step))
            allowed = self.rules.allowed(available, last_output)
            done = recorded.steps.get(step)
            summarized = recorded.summaries.get(step)
            if summarized is not None:
                self._apply_summary(messages, summarized)
            if done is None and self.cancelled:
                # Between steps, so every tool call in the history has its result.
                self.steps = step
                return "cancelled", None
            if done is not None:
                # Answered before a crash: never ask the LLM again.
                reply = done.message
                self.usage = self.usage + done.usage
            else:
                tools = tool_schemas(
                    [t for t in agent["tools"] if t not in self.client_tools],
                    allowed,
                    heartbeat=memgpt,
                    user_tools={
                        name: t
                        for name, t in agent.get("user_tools", {}).items()
                        if name not in self.client_tools
                    },
                ) + [{"type": "function", "function": spec} for spec in self.client_tools.values()]
                try:
                    reply = await self._llm_step(
                        agent,
                        handle,
                        tools,
                        messages,
                        step,
                        step_id,
                        self.rules.forces_tool_call(),
                    )
                except RunCancelled:
                    self.steps = step
                    return "cancelled", None
                except (llm.LLMError, UnknownProvider) as exc:
                    log.warning("run %s: LLM call failed: %s", self.cmd.run_id, exc)
                    return "llm_api_error", str(exc)
                except ContextOverflow as exc:
                    return "context_window_overflow_in_system_prompt", str(exc)
            messages.append(reply)
            if reply.approval_request and reply.tool_calls:
                return "requires_approval", None
            if not reply.tool_calls:
                uncalled = self.rules.uncalled_required(available)
                if uncalled and not final:
                    messages.append(
                        self._nudge(
                            step,
                            f"ToolRuleViolated: You must call {', '.join(uncalled)} at least"
                            " once to exit the loop.",
                        )
                    )
                    continue
                return "end_turn", None
            ends_turn = terminal = False
            heartbeat = not memgpt
            for call in reply.tool_calls:
                if call.name in available and call.name not in allowed:
                    tool_msg = await self._refuse(call, step, step_id, recorded, allowed)
                    messages.append(tool_msg)
                    heartbeat = True
                    continue
                tool_msg, outcome_ends = await self._tool_step(agent, call, step, step_id, recorded)
                messages.append(tool_msg)
                if call.name in available:
                    self.rules.record(call.name)
                last_output = tool_msg.content
                ends_turn = ends_turn or outcome_ends
                terminal = terminal or self.rules.is_terminal(call.name)
                heartbeat = heartbeat or (
                    wants_heartbeat(call)
                    or tool_msg.status == "error"
                    or self.rules.continues(call.name)
                )
            if terminal:
                return "tool_rule", None
            uncalled = self.rules.uncalled_required(available)
            if uncalled and not final:
                messages.append(
                    self._nudge(
                        step,
                        f"Continuing, user expects these tools: [{', '.join(uncalled)}]"
                        " to be called still.",
                    )
                )
                continue
            if ends_turn or not heartbeat:
                return "end_turn", None
            if memgpt:
                messages.append(
                    self._nudge(
                        step, "Function called using request_heartbeat=true, returning control"
                    )
                )
        return "max_steps", None

    async def _answer_approvals(
        self, agent: dict[str, Any], history: list[ChatMessage], recorded: RunLog
    ) -> list[ChatMessage]:
        """Carry out the answers to the last turn's pending tool calls, in the calls' order.

        Calls that waited for no answer (held with those that did) run now.
        """
        waiting = next(
            (m for m in reversed(history) if m.role == "assistant" and m.approval_request), None
        )
        if waiting is None:
            return []
        answered = {m.tool_call_id for m in history if m.role == "tool"}
        decisions = {a.tool_call_id: a for a in self.cmd.approvals}
        out: list[ChatMessage] = []
        for call in waiting.tool_calls:
            if call.id in answered:
                continue
            decision = decisions.get(call.id)
            step_id = derived_id("step", self.cmd.run_id, "approvals")
            held = not waiting.awaiting(call)
            approved = decision is not None and decision.approve and decision.tool_return is None
            if held or approved:
                tool_msg, _ = await self._tool_step(agent, call, -1, step_id, recorded)
                self.rules.record(call.name)
            else:
                status: Literal["success", "error"] = "error"
                if decision is None:
                    text = "Error: no decision was given for this tool call."
                elif decision.tool_return is not None:
                    text, status = decision.tool_return, decision.status
                else:
                    text = "Error: request to call tool denied."
                    if decision.reason:
                        text += f" User reason: {decision.reason}"
                tool_msg = await self._record_return(call, -1, step_id, recorded, text, status)
            out.append(tool_msg)
        return out

    async def _record_return(
        self,
        call: ToolCall,
        step: int,
        step_id: str,
        recorded: RunLog,
        text: str,
        status: Literal["success", "error"],
    ) -> ChatMessage:
        """A tool result that did not come from running the tool here."""
        returned = recorded.returned.get(call.id)
        if returned is not None:
            return returned.message
        return await self._append_return(call, step, step_id, text, status)

    async def _append_return(
        self,
        call: ToolCall,
        step: int,
        step_id: str,
        text: str,
        status: Literal["success", "error"],
        stdout: list[str] | None = None,
        stderr: list[str] | None = None,
    ) -> ChatMessage:
        """Record a tool call's result (ToolReturned) and give it as the tool message.

        The result is made storable and bounded (outputs.py): whatever a tool
        or a client returns, the event fits the log.
        """
        tool_msg = ChatMessage(
            id=derived_id("message", self.cmd.run_id, str(step), call.id),
            role="tool",
            name=call.name,
            tool_call_id=call.id,
            content=bounded(text, MAX_TOOL_RETURN_CHARS),
            status=status,
            stdout=tool_output(stdout),
            stderr=tool_output(stderr),
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
        return tool_msg

    def _apply_summary(self, messages: list[ChatMessage], event: ContextSummarized) -> None:
        """Replace the evicted messages by the summary (also when replaying a recorded one)."""
        if event.evicted_message_ids:  # (a version 1 event)
            gone = set(event.evicted_message_ids)
            kept = [m for m in messages if m.id not in gone]
            evicted = len(messages) - len(kept)
        else:
            # Every message before the first kept one left.
            evicted = next(
                (i for i, m in enumerate(messages) if m.id == event.first_kept_message_id), 0
            )
            kept = messages[evicted:]
        messages[:] = [event.summary, *kept]
        self.run_start = max(1, self.run_start - evicted + 1)

    async def _summarize(
        self,
        agent: dict[str, Any],
        handle: Handle,
        messages: list[ChatMessage],
        step: int,
        window: int,
        force: bool = False,
    ) -> ContextSummarized | None:
        """Summarize older turns into one message, recorded before it is used.

        Cuts only where a user turn begins, so a tool call is never separated from
        its result, and never inside this run, so a pending approval (always the
        end of the previous run's turn, answered by this one) stays whole.
        """
        family = llm.family(handle)
        cuts = [
            i
            for i in range(1, min(self.run_start, len(messages) - 1) + 1)
            if messages[i].role == "user" and messages[i].id is not None
        ]
        if not cuts:
            return None
        cut = cuts[-1]
        if not force:
            budget = KEEP_AFTER_SUMMARY * window
            for i in cuts:
                rest = tokens.estimate_request("", llm.to_openai_messages(messages[i:]), [], family)
                if self.tokens(rest) <= budget:
                    cut = i
                    break
        evicted = messages[:cut]
        transcript = "\n".join(
            f"{m.role}: {m.content or ''}"
            + "".join(f" [called {tc.name}({tc.arguments})]" for tc in m.tool_calls)
            for m in evicted
        )
        result = await llm.complete(
            handle,
            [
                {"role": "system", "content": SUMMARIZER_PROMPT},
                {"role": "user", "content": transcript},
            ],
            [],
        )
        self.usage = self.usage + result.usage
        summary = ChatMessage(
            id=derived_id("message", self.cmd.run_id, str(step), "summary"),
            role="user",
            content=SUMMARY_PREFIX + bounded(result.content or "", MAX_SUMMARY_CHARS),
        )
        event = ContextSummarized(
            run_id=self.cmd.run_id,
            agent_id=self.cmd.agent_id,
            step_number=step,
            summary=summary,
            evicted_count=len(evicted),
            first_kept_message_id=messages[cut].id,
            messages_before=len(messages),
            messages_after=len(messages) - cut + 1,
        )
        await self._append(event, f"summary-{step}")
        self._apply_summary(messages, event)
        return event

    def _nudge(self, step: int, text: str) -> ChatMessage:
        """A hidden message that keeps the loop going; derived from recorded facts, so a
        resumed run derives it again instead of storing it."""
        return ChatMessage(
            id=derived_id("message", self.cmd.run_id, str(step), "nudge"),
            role="user",
            content=f"{NON_USER_PREFIX}{text}",
        )

    async def _refuse(
        self, call: ToolCall, step: int, step_id: str, recorded: RunLog, allowed: set[str]
    ) -> ChatMessage:
        """A call the tool rules forbid: not run; the model is told what it may call."""
        text = (
            f"[ToolConstraintError] Cannot call {call.name}, valid tools to call include:"
            f" {sorted(allowed)}."
        )
        return await self._record_return(call, step, step_id, recorded, text, "error")

    async def _tool_step(
        self, agent: dict[str, Any], call: ToolCall, step: int, step_id: str, recorded: RunLog
    ) -> tuple[ChatMessage, bool]:
        returned = recorded.returned.get(call.id)
        if returned is not None:
            ends = call.name == "send_message" and returned.message.status == "success"
            return returned.message, ends
        requested = recorded.requested.get(call.id)
        if requested is not None:
            outcome = await self._resolve_in_doubt(agent, call, requested[1])
        else:
            user_tool = call.name in agent.get("user_tools", {})
            if (call.name in agent["tools"] or user_tool) and call.name not in PURE_TOOLS:
                await self._append(
                    ToolCallRequested(
                        run_id=self.cmd.run_id,
                        agent_id=self.cmd.agent_id,
                        step_id=step_id,
                        tool_call_id=call.id,
                        tool_name=call.name,
                        command_id=self._memory_command_id(call)
                        if call.name in MEMORY_TOOLS
                        else None,
                    ),
                    f"tool-requested-{step}-{call.id}",
                )
            outcome = await self._run_tool(agent, call)
        tool_msg = await self._append_return(
            call,
            step,
            step_id,
            outcome.text,
            "success" if outcome.ok else "error",
            outcome.stdout,
            outcome.stderr,
        )
        return tool_msg, outcome.ends_turn

    async def _state_at(self, seq: int) -> RunState:
        """The run's record and the agent's history, as of log position `seq` or later."""
        # Cancelled while it waited for its turn (possibly while the previous
        # run was still going)? Later cancellations show up as conflicts on our
        # appends: see _read_news.
        checked = self.s.reads.row_at(
            seq, "runs", _RUN_RECORD, self.cmd.run_id, timeout=PROJECTION_TIMEOUT
        )
        async with checked as (conn, row):
            history = await self.s.load_history(
                self.cmd.agent_id, exclude_run=self.cmd.run_id, conn=conn
            )
        if row is None:
            return RunState(False, history, None)
        record = RunRecord(row["status"], row["stop_reason"], row["last_seq"], row["started_seq"])
        return RunState(bool(row["cancel_requested"]), history, record)

    async def _read_core(self, min_seq: int) -> CoreMemory:
        """The agent's blocks and archival summary, as of at least log position `min_seq`."""
        if min_seq:
            await self.s.watcher.wait(min_seq, "memory")
        return await read_core_memory(self.s.pool, self.cmd.agent_id)

    async def _system_prompt(self, agent: dict[str, Any], recall_count: int) -> str:
        prefetched, self._core = self._core, None
        if prefetched is not None and prefetched[0] == self.memory_seq:
            core = await prefetched[1]
        else:
            # Memory changed since (a memory tool ran): read it again.
            if prefetched is not None:
                prefetched[1].cancel()
            core = await self._read_core(self.memory_seq)
        return compile_system(
            agent["system"] or default_system(agent["agent_type"]),
            self.cmd.agent_id,
            core["blocks"],
            recall_count,
            archival_count=core["archival_count"],
            archival_tags=core["archival_tags"],
        )
