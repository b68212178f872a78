"""One delivery of StartRun in the live system: wait for the agent's turn, read what the
run needs (while waiting, where it can), run the loop, hand the agent's turn on.

Whatever brought the command (a redelivery after a lost ack, a restart of
NATS, someone publishing it again), the log decides: a finished run is
answered from its record and never run again, and a started one goes on from
its recorded facts (run_log.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nats.aio.msg import Msg

from o_contracts import subjects
from o_contracts.base import Reply
from o_contracts.commands import DeliverCallback, StartRun, callback_command_id
from o_contracts.concurrency import policy_for
from o_contracts.envelope import Envelope, MalformedMessage, decode, known_type
from o_contracts.events import (
    RunCancellationRequested,
    RunQueued,
    RunRolledBack,
    RunSteerRequested,
)
from o_contracts.ids import derived_id
from o_contracts.models import ChatMessage
from o_contracts.projection_names import RUNS
from o_executor import run_answers
from o_executor.live.deps import LiveDeps, read_core
from o_executor.live.recorder import PROJECTION_TIMEOUT, Recorder, RunTakenOver
from o_executor.live.tools import PRODUCER, LiveTools
from o_executor.run import Completed, RunInputs, evolution_tools, run_agent, versions
from o_executor.run.agent import AgentConfig
from o_executor.run.context import Run
from o_executor.run.loop import agent_gone
from o_executor.run_log import RunLog
from o_executor.run_queue import Cursor
from o_memory.core_memory import CoreMemory, with_isolated
from o_runtime.commands import Delivery, HandedOver
from o_runtime.instruments import measured
from o_runtime.outages import is_outage

if TYPE_CHECKING:
    from o_executor.service import ExecutorService


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
class SteeredInto:
    """The run that took this run's messages (StartRun.steer): this one has nothing to do."""

    run_id: str
    stop_reason: str | None
    last_seq: int


@dataclass(frozen=True)
class LogState:
    """The run and its agent's history as of a log position (checked, o_runtime/reads.py)."""

    cancelled: bool
    history: list[ChatMessage]
    record: RunRecord | None
    # Runs this one rolls back before it starts (concurrency rollback), not yet done.
    rolls_back: list[str] = field(default_factory=list)
    steered_into: SteeredInto | None = None


_RUN_RECORD = (
    "SELECT status, stop_reason, last_seq, started_seq, cancel_requested,"
    # (Only a run admitted with RunQueued and not started yet can have runs to roll back.)
    " CASE WHEN status = 'created' THEN ARRAY(SELECT r.id FROM runs r"
    " WHERE r.interrupted_by = runs.id AND r.rolled_back AND EXISTS (SELECT 1 FROM messages m"
    " WHERE m.run_id = r.id AND NOT m.rolled_back)) END AS rolls_back FROM runs WHERE id = $1"
)
# The run that took a steering run's first message ($1), other than itself ($2).
_TAKEN_BY = (
    "SELECT r.id, r.stop_reason, r.last_seq FROM messages m JOIN runs r ON r.id = m.run_id"
    " WHERE m.id = $1 AND m.run_id <> $2"
)
# What a run listens for on its conversation's subject while it runs.
_HEARD = frozenset(t.type_name() for t in (RunCancellationRequested, RunQueued, RunSteerRequested))


class _NotQueued(Exception):
    """A command that may not wait for its turn: its reply (LiveRun._may_wait)."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.error)
        self.reply = reply


class LiveRun:
    def __init__(
        self, service: ExecutorService, command: Envelope[StartRun], delivery: Delivery
    ) -> None:
        self.s = service
        self.command = command
        # Where the command sits in the commands stream: runs of one agent go in that order.
        self.delivery = delivery
        self.cmd: StartRun = command.data
        self.subject = self.cmd.lane.events
        # The subject's last sequence as this run knows it (the recorder's, once it runs).
        self.last = 0
        self.recorder: Recorder | None = None
        # Reads ahead: the agent's row and core memory (for the first prompt), read while
        # the run waited for its turn; the agent's state as of where this process saw its
        # previous run end (that position, the task); the first prompt's core memory, the
        # conversation's own blocks in it.
        self._agent: asyncio.Task[tuple[AgentConfig | None, CoreMemory | None]] | None = None
        self._ahead: tuple[int, asyncio.Task[tuple[int, LogState]]] | None = None
        self._core: tuple[int, asyncio.Task[CoreMemory]] | None = None
        # Set when a RunCancellationRequested for this run (or a RunQueued interrupting
        # it) is published.
        self._cancel_requested = asyncio.Event()
        # Requests to steer this run, by their own run's id (run/steering.py).
        self._steers: dict[str, RunSteerRequested] = {}
        # When this delivery began (o.run.duration).
        self._delivered = time.perf_counter()

    async def execute(self) -> Reply:
        # The runs projection notes the run's answer as it applies it, for the reply.
        with run_answers.awaited.awaiting(self.cmd.run_id):
            return await self._execute_in_turn()

    async def _execute_in_turn(self) -> Reply:
        delivery = self.delivery
        queue = self.s.run_queue
        # Read the agent while we wait for our turn; if we had to wait (an
        # earlier run was going), it is read again once our turn comes.
        self._agent = asyncio.create_task(self.s.load_agent_and_core(self.cmd.agent_id))
        # Likewise the history, if this process finished the agent's previous
        # run: usually the cursor still says so once the turn is checked (and
        # _run uses this only if it does).
        written = queue.written(self.cmd.lane.key)
        if written is not None and not delivery.redelivered:
            self._ahead = (written.event_seq, asyncio.create_task(self._last_and_state(written)))
        try:
            cursor = await queue.wait_turn(
                self.cmd.lane.key,
                delivery.stream_seq,
                before_waiting=self._may_wait if self.cmd.enqueue_only else None,
            )
        except _NotQueued as refusal:
            self._drop_reads_ahead()
            return refusal.reply
        except BaseException:
            self._drop_reads_ahead()
            raise
        if cursor.waited:
            self._drop_reads_ahead()
        try:
            reply = await self._execute(cursor)
        except RunTakenOver:
            # Another executor holds a later delivery of this command (this one stalled past
            # the ack wait, or was taken for dead): it finishes the run, acks and answers.
            # Acking here would leave its delivery unguarded should it die too.
            raise HandedOver(self.cmd.run_id) from None
        except Exception as exc:
            if delivery.last_attempt and not is_outage(exc):
                # It will be dead-lettered: the agent's next run must not wait for it.
                # (An outage never dead-letters a run: it is tried again.)
                await queue.finish(self.cmd.lane.key, delivery.stream_seq, self._last())
            raise
        # Hand the agent's turn on while the run's events are projected.
        await asyncio.gather(
            queue.finish(
                self.cmd.lane.key, delivery.stream_seq, max(self._last(), reply.seq or 0), cursor
            ),
            self._projected(reply),
        )
        await self._ask_for_callback(reply)
        return self._with_answer(reply)

    async def _may_wait(self) -> None:
        """A command sent before its sender read the agent (StartRun.enqueue_only) found a
        run ahead of it: it waits for its turn only where the agent's concurrency default
        queues runs. Where the default asks for another policy (refuse, interrupt, roll
        back, steer: each about the run in flight), it leaves the queue at once with
        nothing recorded and its sender decides the run's admission (raises _NotQueued).
        With no run ahead the default does not matter: every policy runs it."""
        loading = self._agent
        if loading is None:
            loading = asyncio.create_task(self.s.load_agent_and_core(self.cmd.agent_id))
            self._agent = loading
        agent, _ = await asyncio.shield(loading)
        if agent is None:
            return  # (unknown here: its turn says so, 404 with nothing recorded)
        policy = policy_for(None, agent.concurrency, "enqueue")
        if policy == "enqueue":
            return
        await self.s.run_queue.withdraw(self.cmd.lane.key, self.delivery.stream_seq)
        raise _NotQueued(
            Reply(
                ok=False,
                status=409,
                error=f"agent {self.cmd.agent_id} takes messages under {policy!r}",
                result={"concurrency": policy},
            )
        )

    def _with_answer(self, reply: Reply) -> Reply:
        """The reply with the run's answer, as the runs projection of this process noted it
        (run_answers.py; its commit known by now: _projected); as it is otherwise."""
        rows = run_answers.awaited.take(self.cmd.run_id)
        if rows is None or not reply.ok or reply.result is None or "steered_into" in reply.result:
            return reply
        response = run_answers.packed(rows)
        if response is None or response["stop_reason"] is None:
            return reply
        return reply.model_copy(update={"result": {**reply.result, "response": response}})

    async def _ask_for_callback(self, reply: Reply) -> None:
        """A run asked for a completion callback and ended: the gateway is asked to deliver
        it (docs/callbacks.md). Before the command is acked: an executor that dies first
        has the command back, finds the run finished and asks again (the same command id:
        deduplicated, and a DeliverCallback handled twice delivers once)."""
        steered = reply.result is not None and "steered_into" in reply.result
        if self.cmd.callback_url is None or not reply.ok or not reply.seq or steered:
            return
        run_id = self.cmd.run_id
        command = self.command.caused(
            DeliverCallback(run_id=run_id, agent_id=self.cmd.agent_id, completed_seq=reply.seq),
            aggregate_id=run_id,
            producer=PRODUCER,
            id=callback_command_id(run_id),
        )
        await self.s.eventlog.send_command(subjects.callback_command_subject(run_id), command)

    async def _agent_ever_existed(self) -> bool:
        agent_subject = subjects.agent_subject(self.cmd.agent_id)
        return await self.s.eventlog.last_seq(agent_subject) > 0

    def _last(self) -> int:
        return self.recorder.last if self.recorder is not None else self.last

    async def _last_and_state(self, cursor: Cursor) -> tuple[int, LogState]:
        last, state = await asyncio.gather(
            self.s.eventlog.last_seq(self.subject), self._state_at(cursor.event_seq)
        )
        return last, state

    def _drop_reads_ahead(self) -> None:
        for task in (self._agent, self._ahead[1] if self._ahead else None):
            if task is not None:
                task.cancel()
        self._agent = self._ahead = None
        if self._core is not None:
            self._core[1].cancel()
            self._core = None

    async def _projected(self, reply: Reply) -> None:
        # Like every O service: whoever waited for the reply reads its write.
        if reply.seq:
            # (the run's end, or the steering run's: events the runs projection applies)
            await self.s.watcher.wait(reply.seq, RUNS, timeout=PROJECTION_TIMEOUT, applies=True)

    async def _execute(self, cursor: Cursor) -> Reply:
        # Events appended to the conversation's subject are heard as they are published
        # (from the runs projection's consumer, or a subscription: o_runtime/event_tap.py):
        # a cancellation of this run interrupts an LLM call in flight (the log's record of
        # it is still what decides; see Recorder._read_news).
        try:
            async with self.s.agent_events.listening(self.subject, self._on_agent_event):
                return await self._run(cursor)
        finally:
            self._drop_reads_ahead()
            if self.recorder is not None:
                await self.recorder.close()

    def _on_agent_event(self, msg: Msg) -> None:
        if known_type(msg.data) not in _HEARD:
            return
        try:
            event = decode(msg.data).data
        except MalformedMessage:
            return
        run_id = self.cmd.run_id
        if isinstance(event, RunQueued):
            if run_id in event.interrupts:  # a later message interrupts this run
                self._cancel_requested.set()
        elif getattr(event, "run_id", None) != run_id:
            return
        elif isinstance(event, RunSteerRequested):
            self._steers.setdefault(event.steer_run_id, event)
        else:
            self._cancel_requested.set()

    async def _run(self, cursor: Cursor) -> Reply:
        loading, self._agent = self._agent, None
        if loading is None:
            loading = asyncio.create_task(self.s.load_agent_and_core(self.cmd.agent_id))
        # The first prompt's core memory: read with the agent.
        self._core = (0, asyncio.create_task(self._first_core(loading)))
        # The history is what the log held before this run began. Usually the
        # agent's subject is where its previous run left it (the run queue's
        # cursor says where): read the history as of there while checking.
        guess = cursor.event_seq
        ahead, self._ahead = self._ahead, None
        state: LogState | None
        if ahead is not None and ahead[0] == guess:
            (agent, _), (self.last, state) = await asyncio.gather(loading, ahead[1])
        else:
            if ahead is not None:
                ahead[1].cancel()
            ((agent, _), self.last), state = await asyncio.gather(
                asyncio.gather(loading, self.s.eventlog.last_seq(self.subject)),
                self._state_at(guess) if guess else asyncio.sleep(0, None),
            )
        if state is None or self.last != guess:
            state = await self._state_at(self.last)
        record = state.record
        if record is not None and record.finished:
            self.last = max(self.last, record.last_seq)
            return Reply(ok=True, seq=record.last_seq, result={"stop_reason": record.stop_reason})
        if state.steered_into is not None:
            # Another run took this one's messages (concurrency steer): nothing to do.
            into = state.steered_into
            self.last = max(self.last, into.last_seq)
            taken = {"stop_reason": into.stop_reason, "steered_into": into.run_id}
            return Reply(ok=True, seq=into.last_seq, result=taken)
        # Everything so far only read; what follows appends and asks the model. Not before
        # this process is on record as holding the run (o_runtime/holdings.py: a death
        # from here on is seen by a survivor at once). The write went as the command was
        # taken: by now it is usually back.
        await self.delivery.held()
        if state.rolls_back:
            # Those runs have stopped (they came before this one): their messages leave
            # the context before this run reads it.
            await self._roll_back(state.rolls_back)
            state = await self._state_at(self.last)
        self.recorder = Recorder(self.s, self.command, self.last, self._steers)
        if agent is None and await self.recorder.agent_exists():
            agent = await self.s.load_agent(self.cmd.agent_id)  # (its projection was behind)
        if agent is None and record is None and not await self._agent_ever_existed():
            # A command for an agent that never was (from outside: o_runtime/admission.py):
            # refused as the HTTP API refuses it, and nothing is recorded.
            return Reply(ok=False, status=404, error=f"Agent {self.cmd.agent_id} not found")
        recorded = RunLog()
        memory_seq = 0
        if record is not None and record.status != "created":
            # (runs started before started_seq was projected: from the cursor)
            since = record.started_seq - 1 if record.started_seq else cursor.event_seq
            recorded = await RunLog.read(self.s.eventlog, self.subject, self.cmd.run_id, since)
            for steer_run_id, request in recorded.steer_requests.items():
                self._steers.setdefault(steer_run_id, request)
            # Memory edits made before the crash must show in the next prompt.
            info = await self.s.eventlog.js.stream_info(subjects.EVENTS_STREAM)
            memory_seq = info.state.last_seq
        gone = agent is None
        if agent is None:
            agent = AgentConfig.deleted(self.cmd.agent_id)
        # In a canary, the arm this run takes (the one it took, if it is resumed).
        started = recorded.started
        agent = versions.served(
            agent,
            self.cmd.run_id,
            self.cmd.conversation_id,
            started.version if started is not None else None,
        )
        agent = evolution_tools.granted(agent, self.s.config.evolution_enabled)
        tools = LiveTools(
            self.s.eventlog,
            self.s.pool,
            self.command,
            agent,
            self.s.config,
            self.s.reads,
            self._cancel_requested,
            memory_seq,
        )
        core, self._core = self._core, None
        deps = LiveDeps(
            self.s,
            self.recorder,
            tools,
            cancelled=state.cancelled,
            cancel_requested=self._cancel_requested,
            core=core,
        )
        try:
            inputs = RunInputs(
                self.command, agent, state.history, recorded, known=record is not None
            )
            if gone:
                outcome = await agent_gone(Run(inputs, deps), known=record is not None)
            else:
                outcome = await run_agent(inputs, deps)
        finally:
            deps.drop_reads_ahead()
        if isinstance(outcome, Completed):
            ended = {"stop_reason": outcome.stop_reason.value}
            measured.runs_completed.add(1, ended)
            measured.run_duration.record(time.perf_counter() - self._delivered, ended)
        if not isinstance(outcome, Completed):
            detail = {"detail": outcome.detail} if outcome.detail is not None else None
            return Reply(
                ok=False, status=outcome.status, error=outcome.error, seq=outcome.seq, result=detail
            )
        # (What the gateway renders the answer with, when it sent the command unread.)
        result: dict[str, Any] = {
            "stop_reason": outcome.stop_reason.value,
            "agent_type": agent.agent_type,
            "sleeptime": agent.enable_sleeptime,
        }
        if outcome.summary is not None:
            result |= {
                "summary": outcome.summary.summary.content,
                "num_messages_before": outcome.summary.messages_before,
                "num_messages_after": outcome.summary.messages_after,
            }
        return Reply(ok=True, seq=outcome.seq, result=result)

    async def _first_core(
        self, loading: asyncio.Task[tuple[AgentConfig | None, CoreMemory | None]]
    ) -> CoreMemory:
        # (Shielded: dropping the core memory read ahead leaves the agent's read to _run.)
        _, core = await asyncio.shield(loading)
        if core is None:  # no agent as read ahead (its projection may have been behind)
            return await read_core(self.s, self.cmd.agent_id, 0, self.cmd.isolated_block_ids)
        return await with_isolated(self.s.pool, core, self.cmd.isolated_block_ids)

    async def _state_at(self, seq: int) -> LogState:
        """The run's record and the agent's history, as of log position `seq` or later."""
        # Cancelled while it waited for its turn (possibly while the previous run
        # was still going)? Later cancellations show up as conflicts on our
        # appends: see Recorder._read_news.
        # The record and the history in one statement (one round trip on the run's path),
        # the history beside the record so that it is there when the run has none yet.
        history = self.s.history.begin(self.cmd.lane, exclude_run=self.cmd.run_id, first_param=2)
        checked = self.s.reads.row_at(
            seq,
            RUNS,
            f"SELECT h.*, r.* FROM ({history.sql}) AS h LEFT JOIN ({_RUN_RECORD}) AS r ON true",
            self.cmd.run_id,
            *history.args,
            timeout=PROJECTION_TIMEOUT,
        )
        taken = None
        async with checked as (conn, found):
            # (None: neither messages nor a record)
            messages = await self.s.history.complete(history, found, conn)
            row = found if found is not None and found["status"] is not None else None
            if row is None and self.cmd.steer and self.cmd.messages:
                taken = await conn.fetchrow(_TAKEN_BY, self.cmd.messages[0].id, self.cmd.run_id)
        if row is None:
            into = None
            if taken is not None:
                into = SteeredInto(taken["id"], taken["stop_reason"], taken["last_seq"])
            return LogState(False, messages, None, steered_into=into)
        record = RunRecord(row["status"], row["stop_reason"], row["last_seq"], row["started_seq"])
        rolls_back = list(row["rolls_back"] or [])
        return LogState(bool(row["cancel_requested"]), messages, record, rolls_back)

    async def _roll_back(self, run_ids: list[str]) -> None:
        """RunRolledBack for each run, caused by this run's command (ids derived from it: a
        redelivery appends the same facts, and finds them done once projected)."""
        for run_id in run_ids:
            event = self.command.caused(
                RunRolledBack(run_id=run_id, agent_id=self.cmd.agent_id, by_run_id=self.cmd.run_id),
                aggregate_id=self.cmd.agent_id,
                producer=PRODUCER,
                id=derived_id("evt", self.cmd.run_id, "rolled-back", run_id),
            )
            appended = await self.s.eventlog.append(self.subject, event)
            self.last = max(self.last, appended.seq)
