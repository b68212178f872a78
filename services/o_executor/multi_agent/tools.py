"""The three multi-agent tools, as one run calls them.

The loop has recorded the call (ToolCallRequested) before any of this runs, and records
its result after; a caller resumed in between calls it again, which finds the runs it
started (runs.py). Whatever goes wrong with the other agent (unknown, too slow, its run
failed) is this tool's error, with the reason, and the caller's run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Literal

from o_contracts.commands import StartRun
from o_contracts.models import ToolCall
from o_executor.multi_agent import messages
from o_executor.multi_agent.runs import OtherAgent, OtherRuns, RunEnd
from o_executor.run.deps import ToolOutcome
from o_runtime.eventlog import AppendRejected

WAIT_FOR_REPLY = "send_message_to_agent_and_wait_for_reply"
NOTIFY = "send_message_to_agent_async"
BROADCAST = "send_message_to_agents_matching_tags"
CANCELLED: Literal["cancelled"] = "cancelled"


class BadArguments(ValueError):
    pass


class MultiAgentTools:
    def __init__(self, runs: OtherRuns, timeout: float, cancelled: asyncio.Event) -> None:
        self.runs = runs
        # How long a reply is waited for (ExecutorSettings.agent_reply_timeout).
        self.timeout = timeout
        # Set when the caller's run is asked to stop.
        self.cancelled = cancelled

    @property
    def caller(self) -> StartRun:
        return self.runs.caller.data

    async def run(self, call: ToolCall, args: dict[str, Any]) -> ToolOutcome:
        try:
            if call.name == WAIT_FOR_REPLY:
                return await self._wait_for_reply(call.id, args)
            if call.name == NOTIFY:
                return await self._notify(call.id, args)
            if call.name == BROADCAST:
                return await self._broadcast(call.id, args)
        except BadArguments as exc:
            return ToolOutcome(False, str(exc))
        except AppendRejected as exc:
            return ToolOutcome(False, f"the message could not be sent: {exc.reason}")
        return ToolOutcome(False, f"'{call.name}' is not a multi-agent tool")

    async def _wait_for_reply(self, call_id: str, args: dict[str, Any]) -> ToolOutcome:
        message, other_id = _text(args, "message"), _text(args, "other_agent_id")
        refusal = self._deadlock(other_id)
        if refusal is not None:
            return ToolOutcome(False, refusal)
        other = await self.runs.agent(other_id)
        if other is None:
            return ToolOutcome(False, f"Agent {other_id} not found")
        answer = await self._ask(call_id, other, message)
        if isinstance(answer, str):
            return ToolOutcome(False, answer)
        return ToolOutcome(True, messages.tool_return(answer))

    async def _notify(self, call_id: str, args: dict[str, Any]) -> ToolOutcome:
        # Nothing waits here, so an agent may notify itself: the run waits its turn.
        message, other_id = _text(args, "message"), _text(args, "other_agent_id")
        other = await self.runs.agent(other_id)
        if other is None:
            return ToolOutcome(False, f"Agent {other_id} not found")
        await self.runs.start(
            other,
            self.runs.run_id(call_id, other.id),
            messages.notification(self.caller.agent_id, message),
            awaited_by=[],
            background=True,
        )
        return ToolOutcome(True, messages.SENT)

    async def _broadcast(self, call_id: str, args: dict[str, Any]) -> ToolOutcome:
        message = _text(args, "message")
        match_all, match_some = _tags(args, "match_all"), _tags(args, "match_some")
        others = await self.runs.tagged(match_all, match_some)
        # Every agent is asked at once: each has its own lane, so none waits for another.
        entries = await asyncio.gather(*(self._ask_tagged(call_id, o, message) for o in others))
        return ToolOutcome(True, messages.tool_return(list(entries)))

    async def _ask_tagged(self, call_id: str, other: OtherAgent, message: str) -> dict[str, Any]:
        refusal = self._deadlock(other.id)
        if refusal is not None:
            return messages.failed_entry(other.id, refusal)
        try:
            answer = await self._ask(call_id, other, message)
        except AppendRejected as exc:
            answer = f"the message could not be sent: {exc.reason}"
        return messages.failed_entry(other.id, answer) if isinstance(answer, str) else answer

    async def _ask(self, call_id: str, other: OtherAgent, message: str) -> dict[str, Any] | str:
        """The other agent's answer as Letta gives it, or why there is none."""
        run_id = self.runs.run_id(call_id, other.id)
        await self.runs.start(
            other,
            run_id,
            messages.expecting_reply(self.caller.agent_id, message),
            # This run waits for that one, and so does whoever waits for this one.
            awaited_by=[self.caller.agent_id, *self.caller.awaited_by],
        )
        end = await self._end_unless_cancelled(other.id, run_id)
        if end is CANCELLED:
            return (
                f"the run was cancelled while waiting for agent {other.id}'s reply; its run"
                f" {run_id} goes on"
            )
        if not isinstance(end, RunEnd):
            return (
                f"agent {other.id} did not reply within {self.timeout:g}s; its run {run_id}"
                " goes on, and its answer will not come back to you"
            )
        if end.failed:
            return f"agent {other.id}'s run {run_id} ended without a reply ({end.stop_reason})" + (
                f": {end.error}" if end.error else ""
            )
        texts = messages.reply_texts(await self.runs.replies(run_id, end.seq), other.agent_type)
        return messages.entry(other.id, texts)

    async def _end_unless_cancelled(
        self, agent_id: str, run_id: str
    ) -> RunEnd | Literal["cancelled"] | None:
        """The run's end (None: not within the timeout), unless the caller is cancelled
        first: then it stops waiting at once (and the loop ends its run); the other agent's
        run is not the caller's to stop."""
        ending = asyncio.create_task(self.runs.ended(agent_id, run_id, self.timeout))
        cancelled = asyncio.create_task(self.cancelled.wait())
        try:
            await asyncio.wait({ending, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (ending, cancelled):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        return ending.result() if not ending.cancelled() else CANCELLED

    def _deadlock(self, other_id: str) -> str | None:
        """Why waiting for `other_id` could never end, if it could not.

        An agent's runs go one at a time: a reply from this agent, or from one that is
        itself waiting for this agent, would wait behind this run forever.
        """
        if other_id == self.caller.agent_id:
            return (
                "an agent cannot wait for a reply from itself: its runs go one at a time, so"
                " the reply would wait behind this run forever"
            )
        if other_id in self.caller.awaited_by:
            return (
                f"agent {other_id} is waiting for this agent's reply, so it cannot answer"
                " before this run ends; give your answer in your reply instead"
            )
        return None


def _text(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise BadArguments(f"'{name}' must be a string")
    return value


def _tags(args: dict[str, Any], name: str) -> list[str]:
    value = args.get(name)
    if value is None:
        return []  # (as Letta: an empty or missing list sets no condition)
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise BadArguments(f"'{name}' must be a list of tags (strings)")
    return value
