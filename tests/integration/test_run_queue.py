"""One agent's runs in arrival order across replicas (o_executor/run_queue.py), on real
NATS: the cursor this process wrote last stands for it (one read fewer per run), and a
cursor another replica moved meanwhile is read, heard or not."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from nats.aio.msg import Msg

from o_contracts import subjects
from o_contracts.ids import new_id
from o_devtools.embedded import EmbeddedNats
from o_devtools.supervisor import ServerKeeper
from o_executor.run_queue import Cursor, RunQueue
from o_runtime.commands import Deferred
from o_runtime.eventlog import EventLog
from tests.integration.commands_support import command
from tests.integration.conftest import server_operator

# A NATS server of these tests' own: on the shared one, an executor of an e2e system
# started earlier in the session would take the StartRuns sent here, and finish them.


@pytest.fixture
async def eventlog(nats_keeper: ServerKeeper) -> AsyncIterator[EventLog]:
    server = nats_keeper.server
    assert isinstance(server, EmbeddedNats)
    log = await EventLog.connect(server.url, name="test", identity=server_operator(server))
    yield log
    await log.close()


@pytest.fixture
async def other_log(nats_keeper: ServerKeeper) -> AsyncIterator[EventLog]:
    """A second process' connection: another executor replica."""
    server = nats_keeper.server
    assert isinstance(server, EmbeddedNats)
    identity = server_operator(server)
    log = await EventLog.connect(server.url, name="other-replica", identity=identity)
    yield log
    await log.close()


class Counted(RunQueue):
    """A RunQueue that counts its reads of the cursor, and says when it heard a write."""

    reads = 0

    async def cursor(self, agent_id: str) -> Cursor:
        self.reads += 1
        return await super().cursor(agent_id)

    async def _on_put(self, msg: Msg) -> None:
        await super()._on_put(msg)
        self.heard.set()

    @property
    def heard(self) -> asyncio.Event:
        if not hasattr(self, "_heard"):
            self._heard = asyncio.Event()
        return self._heard


async def start_run(eventlog: EventLog, agent_id: str) -> int:
    """A StartRun for the agent in the commands stream: its stream sequence."""
    sent = await eventlog.send_command(
        subjects.executor_command_subject(agent_id), command(agent_id)
    )
    return sent.seq


async def deaf(eventlog: EventLog) -> Counted:
    """A replica that never hears other writes (as if every notice were lost)."""
    hearing = await Counted.open(eventlog)
    return Counted(hearing.eventlog, hearing.kv)


async def test_the_cursor_this_process_wrote_is_not_read_again(eventlog: EventLog) -> None:
    queue = await Counted.open(eventlog)
    agent_id = new_id("agent")
    first, second = await start_run(eventlog, agent_id), await start_run(eventlog, agent_id)
    turn = await queue.wait_turn(agent_id, first)
    assert queue.reads == 1  # nothing written by this process yet: read
    await queue.finish(agent_id, first, 7, turn)
    turn = await queue.wait_turn(agent_id, second)
    assert queue.reads == 1  # its own write stands for the cursor
    assert (turn.command_seq, turn.event_seq) == (first, 7)


async def test_a_cursor_another_replica_moved_unheard_is_read_after_a_pause(
    eventlog: EventLog, other_log: EventLog
) -> None:
    here, there = await deaf(eventlog), await Counted.open(other_log)
    agent_id = new_id("agent")
    runs = [await start_run(eventlog, agent_id) for _ in range(3)]
    await here.finish(agent_id, runs[0], 1, await here.wait_turn(agent_id, runs[0]))
    await there.finish(agent_id, runs[1], 2, await there.wait_turn(agent_id, runs[1]))
    # Its own write says the second is still pending: it waits, looks again, reading.
    turn = await here.wait_turn(agent_id, runs[2])
    assert turn.waited and (turn.command_seq, turn.event_seq) == (runs[1], 2)


async def test_a_cursor_another_replica_moved_and_heard_is_read_at_once(
    eventlog: EventLog, other_log: EventLog
) -> None:
    here, there = await Counted.open(eventlog), await Counted.open(other_log)
    agent_id = new_id("agent")
    runs = [await start_run(eventlog, agent_id) for _ in range(3)]
    await here.finish(agent_id, runs[0], 1, await here.wait_turn(agent_id, runs[0]))
    await here.heard.wait()  # (its own write, heard back)
    here.heard.clear()
    await there.finish(agent_id, runs[1], 2, await there.wait_turn(agent_id, runs[1]))
    await asyncio.wait_for(here.heard.wait(), 10)
    reads = here.reads
    turn = await here.wait_turn(agent_id, runs[2])
    assert here.reads == reads + 1 and not turn.waited
    assert (turn.command_seq, turn.event_seq) == (runs[1], 2)


class Bounded(RunQueue):
    """A RunQueue that says when its handlers waiting for a turn reach its bound."""

    def _begin_waiting(self, counted: contextlib.ExitStack) -> None:
        super()._begin_waiting(counted)
        if self.handlers_waiting == self.turn_waits.limit:
            self.full.set()

    @property
    def full(self) -> asyncio.Event:
        if not hasattr(self, "_full"):
            self._full = asyncio.Event()
        return self._full


async def test_runs_past_the_waiting_bound_go_back_to_the_stream_at_once(
    eventlog: EventLog,
) -> None:
    """Handlers waiting for a turn are bounded: past the bound a run's command is deferred
    at once, so runs waiting behind one agent leave handlers to other agents' runs."""
    queue = await Bounded.open(eventlog, max_waiting=2)
    agent_id = new_id("agent")
    runs = [await start_run(eventlog, agent_id) for _ in range(4)]
    turn = await queue.wait_turn(agent_id, runs[0])  # the agent's first: running
    waiting = [asyncio.create_task(queue.wait_turn(agent_id, seq)) for seq in runs[1:3]]
    await asyncio.wait_for(queue.full.wait(), 10)
    with pytest.raises(Deferred):
        await queue.wait_turn(agent_id, runs[3])
    assert queue.handlers_waiting == 2
    # Another agent's first run starts whatever waits.
    other = new_id("agent")
    assert not (await queue.wait_turn(other, await start_run(eventlog, other))).waited
    await queue.finish(agent_id, runs[0], 1, turn)
    second = await asyncio.wait_for(waiting[0], 10)
    assert second.waited and second.command_seq == runs[0]
    waiting[1].cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting[1]
    assert queue.handlers_waiting == 0
