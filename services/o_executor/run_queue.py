"""One agent's runs execute one at a time, in the order their commands arrived.

Why this design: the gateway (or any NATS client) sends `StartRun` to
`o.cmd.executor.<agent_id>`, so the commands stream already holds each agent's
runs in arrival order. Every executor replica pulls from one shared durable
consumer (any replica may take any command, so other agents run in parallel),
and a per-agent cursor in NATS KV says "every StartRun of this agent up to
stream sequence N is finished". A replica holding command S asks the stream
for the agent's first command after the cursor (`next_by_subj`); only when
that is S does it run. Finishing advances the cursor with compare-and-swap,
which wakes the next command's holder (the KV put, heard on core NATS), on
whichever replica.

A partitioned consumer (max_ack_pending=1 per hash bucket) would also order
runs, but it blocks unrelated agents that share a bucket behind a long run;
the cursor costs two reads and one write per run and blocks no one else.

The cursor also records where the agent's subject stood when the last run
finished, so a resumed run reads only its own stretch of the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nats.aio.msg import Msg
from nats.js.api import KeyValueConfig
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.errors import NotFoundError as JsNotFoundError
from nats.js.kv import KeyValue

from o_contracts import subjects
from o_contracts.commands import StartRun
from o_contracts.envelope import MalformedMessage, decode
from o_runtime.commands import Deferred
from o_runtime.eventlog import EventLog
from o_runtime.handler_share import HandlerShare
from o_runtime.log_news import pauses

log = logging.getLogger(__name__)

BUCKET = "o_executor_runs"
# How long a command waits in its handler for its turn before it is handed
# back to the stream (so waiting commands do not fill the consumer's slots).
WAIT_IN_HANDLER = 5.0
REDELIVER_AFTER = 0.5
# Handlers of one process that may wait for a turn at once (the others' commands go back to
# the stream at once): runs waiting behind their agent's must leave handlers to the runs
# that can start, or many messages to one agent would hold up every other agent's.
MAX_WAITING = 8
# Run commands in the consumer's hands at once across replicas, most of them waiting for
# their turn in the stream (deferred: JetStream counts a command nacked with a delay as
# pending, so a bound of the handlers' number let sixteen waiting runs of one agent stop
# every agent's). Its durable is made with it (o_setup/topology.py).
MAX_PENDING_RUNS = 10_000
# Cursors remembered per process (see RunQueue._written); a bound on memory.
MAX_WRITTEN = 10_000


@dataclass(frozen=True)
class Cursor:
    command_seq: int = 0
    event_seq: int = 0
    revision: int = 0
    # Whether wait_turn had to wait for earlier runs to finish.
    waited: bool = False


class RunQueue:
    def __init__(self, eventlog: EventLog, kv: KeyValue, max_waiting: int = MAX_WAITING) -> None:
        self.eventlog = eventlog
        self.kv = kv
        # The handlers of this process that may wait in wait_turn at once.
        self.turn_waits = HandlerShare(max_waiting, REDELIVER_AFTER)
        # Runs waiting for their agent's cursor to move, by agent. A cursor
        # moved by this process wakes them directly; one moved by another
        # replica is heard as the KV put on `$KV.<bucket>.<agent>` (core NATS:
        # one subscription per process, no consumer on the server; a KV watch
        # per waiting run left one consumer behind for 5 minutes each, and at
        # the stream's limit of 1000 every run failed). A notice lost across a
        # reconnection costs at most WAIT_IN_HANDLER: waiters read the cursor
        # again then.
        self._waiting: dict[str, set[asyncio.Event]] = {}
        # Cursors this process wrote last. Usually still current when the
        # agent's next run comes: the next pending command is looked up from there
        # at once, and the cursor is not read again unless another writer was heard
        # moving it since (_cursor_and_next says why a stale one is harmless).
        self._written: dict[str, Cursor] = {}
        # Agents whose cursor another process was heard moving past what we wrote.
        self._moved: set[str] = set()

    @classmethod
    async def open(cls, eventlog: EventLog, max_waiting: int = MAX_WAITING) -> RunQueue:
        try:
            kv = await eventlog.js.key_value(BUCKET)
        except BucketNotFoundError:
            kv = await eventlog.js.create_key_value(
                KeyValueConfig(bucket=BUCKET, history=1, direct=True)
            )
        queue = cls(eventlog, kv, max_waiting)
        await eventlog.nc.subscribe(f"$KV.{BUCKET}.>", cb=queue._on_put)
        return queue

    async def _on_put(self, msg: Msg) -> None:
        agent_id = msg.subject.rsplit(".", 1)[-1]
        written = self._written.get(agent_id)
        if written is not None and _command_seq(msg.data) != written.command_seq:
            # Someone else's write (ours come back too, with what we wrote), or a delete.
            self._moved.add(agent_id)
        self._wake(agent_id)

    def _wake(self, agent_id: str) -> None:
        for event in self._waiting.get(agent_id, ()):
            event.set()

    def written(self, agent_id: str) -> Cursor | None:
        """The agent's cursor as this process last wrote it (it may have moved since)."""
        return self._written.get(agent_id)

    async def cursor(self, agent_id: str) -> Cursor:
        try:
            entry = await self.kv.get(agent_id)
        except KeyNotFoundError:
            return Cursor()
        data = json.loads(entry.value or b"{}")
        return Cursor(int(data["command_seq"]), int(data["event_seq"]), int(entry.revision or 0))

    async def _next_pending(self, agent_id: str, after: int) -> int | None:
        """The stream sequence of the agent's first StartRun after `after`."""
        subject = subjects.executor_command_subject(agent_id)
        seq = after + 1
        while True:
            try:
                msg = await self.eventlog.js.get_msg(
                    subjects.COMMANDS_STREAM, seq=seq, subject=subject, next=True, direct=True
                )
            except JsNotFoundError:
                return None
            try:
                if isinstance(decode(msg.data or b"").data, StartRun):
                    return int(msg.seq or 0)
            except MalformedMessage:
                pass  # dead-lettered by the consumer; never runs, so never blocks
            seq = int(msg.seq or 0) + 1

    async def wait_turn(
        self,
        agent_id: str,
        command_seq: int,
        before_waiting: Callable[[], Awaitable[None]] | None = None,
    ) -> Cursor:
        """Return once every earlier run of the agent is finished (or raise Deferred).

        `before_waiting` is awaited once, when an earlier run is found unfinished, before
        the wait begins: it may raise to leave the queue (see `withdraw`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_IN_HANDLER
        waited = False
        changed = asyncio.Event()
        next_pause, heard = pauses(), False
        waiting = self._waiting.setdefault(agent_id, set())
        # Listen first, then look: a change between the two sets the event.
        waiting.add(changed)
        counted = contextlib.ExitStack()
        try:
            while True:
                changed.clear()
                # (Our own last write stands for the cursor on the first look only.)
                cursor, pending = await self._cursor_and_next(agent_id, read=waited)
                if waited:
                    cursor = dataclasses.replace(cursor, waited=True)
                if cursor.command_seq >= command_seq:
                    return cursor  # already finished (a redelivery after the fact)
                if pending in (command_seq, None):
                    return cursor
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise Deferred(REDELIVER_AFTER)
                if not waited:
                    if before_waiting is not None:
                        await before_waiting()
                    self._begin_waiting(counted)
                waited = True
                # (Looked at again after a pause whatever is heard: a cursor written by
                # another replica can be heard before it is stored; o_runtime/log_news.py.)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), min(remaining, next_pause(heard)))
                heard = changed.is_set()
        finally:
            counted.close()
            waiting.discard(changed)
            if not waiting:
                self._waiting.pop(agent_id, None)

    def _begin_waiting(self, counted: contextlib.ExitStack) -> None:
        """One more handler waiting for a turn (until `counted` closes), or Deferred past
        the bound."""
        counted.enter_context(self.turn_waits.taken())

    @property
    def handlers_waiting(self) -> int:
        return self.turn_waits.busy

    async def _cursor_and_next(self, agent_id: str, read: bool) -> tuple[Cursor, int | None]:
        """The agent's cursor and its first pending command after it.

        Where this process wrote the cursor last and heard no one move it since, its
        write stands for the cursor unless `read`: one read fewer per run. Hearing is not
        relied on (o_runtime/log_news.py): a write by another replica missed leaves our
        cursor behind the real one, never ahead (cursors only move forward), and a cursor
        behind is harmless. The command after it is then either ours, which is the next
        after the real one too or already finished (its run answers from the log, and
        finishing it again changes no cursor: the compare-and-swap fails on the stale
        revision, reads, and finds it done), or an earlier one, already finished, which
        makes us wait one pause and look again, reading.
        """
        written = self._written.get(agent_id)
        if written is None:
            cursor = await self.cursor(agent_id)
            return cursor, await self._next_pending(agent_id, cursor.command_seq)
        if not read and agent_id not in self._moved:
            return written, await self._next_pending(agent_id, written.command_seq)
        cursor, pending = await asyncio.gather(
            self.cursor(agent_id), self._next_pending(agent_id, written.command_seq)
        )
        if cursor.command_seq != written.command_seq:  # another replica moved it since
            self._moved.add(agent_id)  # (until our next write)
            pending = await self._next_pending(agent_id, cursor.command_seq)
        return cursor, pending

    async def withdraw(self, agent_id: str, command_seq: int) -> None:
        """Take a command that will never run out of the agent's queue (refused before
        its turn: StartRun.enqueue_only). Left in the stream it would stand before every
        later command, none of which may run until the cursor passes it, and the cursor
        passes only what ran. Waiters in this process look again at once; another
        replica's look again after a pause (or when the run ahead of them ends, which
        they wait for anyway).

        Taken out before the refusal is sent: an executor that dies between the two leaves
        its sender without an answer until the sender's timeout (a 504, nothing recorded,
        the message not run), where the other order could have a second delivery find its
        turn come and run a message its sender had meanwhile admitted again."""
        with contextlib.suppress(JsNotFoundError):  # (withdrawn by an earlier delivery)
            await self.eventlog.js.delete_msg(subjects.COMMANDS_STREAM, command_seq)
        self._wake(agent_id)

    async def finish(
        self, agent_id: str, command_seq: int, event_seq: int, seen: Cursor | None = None
    ) -> None:
        """Mark the agent's runs up to `command_seq` finished (only ever forward).

        `seen` is the cursor as wait_turn returned it: usually still current
        (it was our turn), which saves reading it again.
        """
        value = json.dumps({"command_seq": command_seq, "event_seq": event_seq}).encode()
        for attempt in range(20):
            cursor = seen if attempt == 0 and seen is not None else await self.cursor(agent_id)
            if cursor.command_seq >= command_seq:
                break
            try:
                if cursor.revision == 0:
                    revision = await self.kv.create(agent_id, value)
                else:
                    revision = await self.kv.update(agent_id, value, last=cursor.revision)
                if len(self._written) >= MAX_WRITTEN:
                    self._written.clear()
                    self._moved.clear()
                self._written[agent_id] = Cursor(command_seq, event_seq, revision)
                self._moved.discard(agent_id)
                break
            except KeyWrongLastSequenceError:
                log.debug("cursor of %s moved meanwhile; reading it again", agent_id)
        self._wake(agent_id)


def _command_seq(value: bytes | None) -> int | None:
    """The command sequence a cursor's value names (None: not a cursor, a delete)."""
    try:
        return int(json.loads(value or b"")["command_seq"])
    except (ValueError, KeyError, TypeError):
        return None
