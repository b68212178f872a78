"""Running a tool in the sandbox, recorded: used by the executor for a run's tool calls and by
the gateway for tools the API runs directly (/v1/tools/run, an agent's tool run by name).

The sandbox runs users' code and holds no JetStream access (docs/security.md), so the
caller keeps the execution's record, on its own subject `o.evt.sandbox.<id>` (the id
derives from the run and the tool call: a resumed run finds it). What it finds there
decides what it does:

- nothing: record `ToolExecutionStarted`, ask a replica (`o.rpc.sandbox.run`), record
  the outcome it answers;
- an outcome: answer with it, run nothing;
- Started without outcome: an earlier call was in flight when its executor stopped, or
  its replica died. If a replica still holds it (`o.rpc.sandbox.executions`), its
  outcome is taken from there when it ends. Otherwise an idempotent tool runs once more;
  any other tool, or a second loss, records `ToolExecutionFailed(failure="interrupted")`,
  because running a tool with side effects twice is worse than reporting that it may
  have half-run.

The replica that takes a call says so at once (a first answer, `running`, with its name;
the outcome is the second). While it waits, the caller asks that replica's liveness subject
every PROBE_EVERY (o_runtime/liveness.py): a replica that died has no responders there, so
its call counts as lost within a moment, and the caller decides as above (runs an idempotent
tool on another replica, or fails the call clearly). A replica that only stops answering
(stalled) is waited for up to LOST_AFTER, as is one that never said it took the call. A
replica that lives is also asked about the call every ASK_EVERY: its outcome, published while
NATS restarted, never reaches the caller's inbox, but the replica keeps finished executions
and answers with it (tests/integration/test_sandbox_faults.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats.errors
from nats.aio.msg import Msg
from nats.js.errors import NotFoundError

from o_contracts import subjects
from o_contracts.base import Event
from o_contracts.commands import RunTool
from o_contracts.envelope import Envelope, MalformedMessage, decode
from o_contracts.events import ToolExecuted, ToolExecutionFailed, ToolExecutionStarted
from o_contracts.requests import ExecutionState, ExecutionStatus
from o_runtime.eventlog import ConcurrencyConflict, EventLog
from o_runtime.liveness import Verdict, checked
from o_runtime.tracing import inject

# How often a waiting caller asks whether the replica running its call lives (an answer of
# "no responders" is a death: the call is decided at once).
PROBE_EVERY = 0.25
# A replica that has not said it took the call is asked about it (on the executions
# subject, which every replica hears) this often; one question waits this long.
ASK_EVERY = 1.0
ASK_TIMEOUT = 1.0
# After this long without an answer from (or about) its replica, a call counts as lost.
LOST_AFTER = 5.0
# A resumed run follows a call another caller left in flight this often.
FOLLOW_EVERY = 0.1
NO_RESPONDERS = "503"
# Every replica busy (or none there): asked again after this, doubling, up to a second.
BUSY_RETRY = 0.05
# Runs of one execution an idempotent tool may get after its replica died.
MAX_ATTEMPTS = 2


def wait_budget(timeout: float) -> float:
    """How long a call may take in all: the tool's limit, a lost replica, one more run."""
    return 2 * (timeout + LOST_AFTER + ASK_TIMEOUT) + 5.0


async def request_execution(
    eventlog: EventLog, command: Envelope[RunTool], timeout: float, producer: str = "executor"
) -> dict[str, Any]:
    """Run the execution `command` names once, recorded; its outcome within `timeout`.

    A NATS request that times out on the way (JetStream unreachable for a moment) is an
    outage, raised as such: the caller tries again later and finds the execution where
    its record left it. Only `timeout` itself running out is the call's outcome."""
    execution = _Execution(eventlog, command, producer)
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            return _result(await execution.outcome())
    except TimeoutError:
        if not deadline.expired():
            raise
        return _error(
            f"the tool sandbox did not answer within {timeout:g}s; the tool may not have run"
        )


class _Execution:
    def __init__(self, eventlog: EventLog, command: Envelope[RunTool], producer: str) -> None:
        self.eventlog = eventlog
        self.command = command
        self.cmd = command.data
        self.producer = producer
        self.subject = subjects.tool_execution_subject(command.id)

    async def outcome(self) -> Event:
        # The attempt whose replica this caller saw die (no one else holds it: not asked).
        lost = 0
        while True:
            seq, last = await self._last()
            if isinstance(last, ToolExecuted | ToolExecutionFailed):
                return last
            attempt = 1
            if isinstance(last, ToolExecutionStarted):
                held = await self._follow() if last.attempt != lost else None
                if held is not None:
                    with contextlib.suppress(ConcurrencyConflict):
                        return await self._record(held, last.attempt, seq)
                    continue
                attempt = last.attempt + 1
                if not self.cmd.idempotent or attempt > MAX_ATTEMPTS:
                    why = (
                        "it is not declared idempotent, so it was not run again"
                        if not self.cmd.idempotent
                        else "it was retried once already"
                    )
                    interrupted = self._failed(
                        "interrupted",
                        f"the tool call stopped mid-way (its sandbox or its run"
                        f" was interrupted); {why}",
                    )
                    with contextlib.suppress(ConcurrencyConflict):
                        return await self._record(interrupted, last.attempt, seq)
                    continue
            started = ToolExecutionStarted(
                execution_id=self.command.id,
                agent_id=self.cmd.agent_id,
                run_id=self.cmd.run_id,
                tool_call_id=self.cmd.tool_call_id,
                tool_name=self.cmd.tool_name,
                attempt=attempt,
                sandbox="",
            )
            try:
                seq = await self._append(started, seq)
            except ConcurrencyConflict:
                continue  # another caller moved first: decide again
            event = await self._call()
            if event is None:
                lost = attempt
                continue  # its replica was lost: Started without outcome, decided above
            with contextlib.suppress(ConcurrencyConflict):
                return await self._record(event, attempt, seq)

    async def _last(self) -> tuple[int, Event | None]:
        try:
            msg = await self.eventlog.js.get_last_msg(subjects.EVENTS_STREAM, self.subject)
        except NotFoundError:
            return 0, None
        data = decode(msg.data or b"").data
        assert isinstance(data, Event)
        return int(msg.seq or 0), data

    async def _append(self, event: Event, last: int) -> int:
        envelope = self.command.caused(event, aggregate_id=self.command.id, producer=self.producer)
        return (await self.eventlog.append(self.subject, envelope, expected_last_seq=last)).seq

    async def _record(self, event: Event, attempt: int, last: int) -> Event:
        event = event.model_copy(update={"attempt": attempt})
        await self._append(event, last)
        return event

    async def _call(self) -> Event | None:
        """Ask a replica to run it; its outcome, or None if the replica was lost."""
        nc = self.eventlog.nc
        pause = BUSY_RETRY
        while True:
            # An inbox of this call's own: the replica answers twice (who took it, then
            # the outcome), which nats-py's request() would not wait for.
            answers: asyncio.Queue[Msg] = asyncio.Queue()
            inbox = await nc.subscribe(nc.new_inbox(), cb=answers.put)
            try:
                await nc.publish(
                    subjects.SANDBOX_RUN,
                    self.command.encode(),
                    reply=inbox.subject,
                    # The caller's trace goes on in the sandbox (o_runtime/tracing.py).
                    headers=inject({}),
                )
                outcome = await self._answers(answers)
            finally:
                with contextlib.suppress(Exception):
                    await inbox.unsubscribe()
            if not isinstance(outcome, _Busy):
                return outcome
            # Every replica is busy (or none runs): ask again shortly.
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _answers(self, answers: asyncio.Queue[Msg]) -> Event | _Busy | None:
        """The call's outcome as its replica answers it; None once the replica is lost."""
        holder = _Holder()
        watching = asyncio.ensure_future(self._watch(holder))
        try:
            while True:
                getting = asyncio.ensure_future(answers.get())
                await asyncio.wait([getting, watching], return_when=asyncio.FIRST_COMPLETED)
                if not getting.done():
                    getting.cancel()
                    await asyncio.gather(getting, return_exceptions=True)
                    ended = watching.result() if not watching.cancelled() else None
                    if ended is not None:
                        # Its outcome, asked of the replica: the answer was lost on the way.
                        return self._answered(ended)
                    break  # the watch ended first: the replica is gone
                decided = self._answer(getting.result(), holder)
                if decided is not None:
                    return decided
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
        # What it answered before it died still counts.
        while not answers.empty():
            decided = self._answer(answers.get_nowait(), holder)
            if isinstance(decided, Event):
                return decided
        return None

    def _answer(self, msg: Msg, holder: _Holder) -> Event | _Busy | None:
        """An answer's outcome, or _Busy; None for the replica saying it took the call."""
        if (msg.headers or {}).get("Status") == NO_RESPONDERS:
            return _Busy()
        try:
            state = ExecutionState.decode(msg.data)
        except ValueError:
            return self._failed("refused", "the sandbox answered something unreadable")
        if state.state == "running":
            holder.took(state.replica)
            return None
        return self._answered(state)

    async def _watch(self, holder: _Holder) -> ExecutionState | None:
        """Return once the replica running the call is gone, or LOST_AFTER went by without
        a word from (or about) it: None. Or once the replica says it ended the call: its
        state (an outcome published while NATS restarted never reaches the inbox, and the
        replica, alive, keeps it)."""
        loop = asyncio.get_running_loop()
        seen = asked = loop.time()
        while loop.time() - seen < LOST_AFTER:
            if holder.replica is None:
                # (an older replica, or one too slow yet to say it took the call)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(holder.known.wait(), ASK_EVERY)
                if holder.replica is None:
                    state = await self._ask()
                    if state is not None:
                        seen = loop.time()
                        holder.took(state.replica)
                    continue
            alive = subjects.sandbox_alive_subject(holder.replica)
            verdict = await checked(self.eventlog.nc, alive)
            if verdict is Verdict.GONE:
                return None
            if verdict is Verdict.ALIVE:
                seen = loop.time()
                if loop.time() - asked >= ASK_EVERY:
                    asked = loop.time()
                    state = await self._ask()
                    if state is not None and state.state != "running":
                        return state
            await asyncio.sleep(PROBE_EVERY)
        return None

    async def _follow(self) -> Event | None:
        """The outcome from the replica that holds the call, once it ends; None if none
        holds it (or the holder is lost while it runs)."""
        loop = asyncio.get_running_loop()
        state = await self._ask()
        if state is None:
            return None
        replica = state.replica
        seen = loop.time()
        while True:
            if state is not None:
                seen = loop.time()
                if state.state != "running":
                    return self._answered(state)
            elif loop.time() - seen >= LOST_AFTER:
                return None
            await asyncio.sleep(FOLLOW_EVERY)
            if replica:
                alive = subjects.sandbox_alive_subject(replica)
                if await checked(self.eventlog.nc, alive) is Verdict.GONE:
                    return None
            state = await self._ask()

    async def _ask(self) -> ExecutionState | None:
        question = ExecutionStatus(execution_id=self.command.id).encode()
        try:
            msg = await self.eventlog.nc.request(
                subjects.SANDBOX_EXECUTIONS, question, timeout=ASK_TIMEOUT
            )
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            return None
        try:
            return ExecutionState.decode(msg.data)
        except ValueError:
            return None

    def _answered(self, state: ExecutionState) -> Event:
        """The replica's answer as the outcome to record (checked: for this execution)."""
        if state.state == "refused" or state.outcome is None:
            return self._failed("refused", state.error or "the sandbox refused the call")
        try:
            event = decode(state.outcome).data
        except MalformedMessage as exc:
            return self._failed("refused", f"the sandbox answered something unreadable: {exc}")
        if (
            not isinstance(event, ToolExecuted | ToolExecutionFailed)
            or event.execution_id != self.command.id
        ):
            return self._failed("refused", "the sandbox answered for another execution")
        return event

    def _failed(self, failure: str, error: str) -> ToolExecutionFailed:
        return ToolExecutionFailed(
            execution_id=self.command.id,
            agent_id=self.cmd.agent_id,
            run_id=self.cmd.run_id,
            tool_call_id=self.cmd.tool_call_id,
            tool_name=self.cmd.tool_name,
            failure=failure,
            error=error,
            sandbox="",
        )


class _Busy:
    """Every replica was busy (or none runs): no responders to the call."""


class _Holder:
    """The replica that said it took the call (once it has)."""

    def __init__(self) -> None:
        self.replica: str | None = None
        self.known = asyncio.Event()

    def took(self, replica: str) -> None:
        if replica and self.replica is None:
            self.replica = replica
            self.known.set()


def _result(event: Event) -> dict[str, Any]:
    if isinstance(event, ToolExecuted):
        result = {"status": "success", "tool_return": event.tool_return}
    else:
        assert isinstance(event, ToolExecutionFailed)
        result = {"status": "error", "tool_return": event.error, "failure": event.failure}
    return result | {"stdout": event.stdout, "stderr": event.stderr, "sandbox": event.sandbox}


def _error(text: str) -> dict[str, Any]:
    return {"status": "error", "tool_return": text, "stdout": [], "stderr": []}
