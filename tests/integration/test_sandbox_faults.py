"""Several sandbox replicas share the work; a replica killed mid-call never hangs the caller:
the call fails clearly, or an idempotent tool is retried once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import msgpack
import nats.errors
import pytest
from nats.aio.msg import Msg

from o_contracts import subjects
from o_contracts.envelope import decode
from o_contracts.events import ToolExecuted, ToolExecutionFailed, ToolExecutionStarted
from o_contracts.requests import ExecutionState, ExecutionStatus
from o_runtime.eventlog import EventLog
from o_runtime.nats_identity import Identity
from o_runtime.sandbox_requests import LOST_AFTER
from o_tool_sandbox.service import ToolSandboxService
from tests.integration.sandbox_support import (
    client,  # noqa: F401
    execution_events,
    run_tool,
    sandbox_nats,  # noqa: F401
    seed_file,
    spawn_sandbox,
    start_sandbox,
    tool_command,
)
from tests.integration.test_nats_flush import wait_stopped

NAP = '''
import time

def nap(seconds: float) -> str:
    """Sleep a while.

    Args:
        seconds: How long.
    """
    time.sleep(seconds)
    return "rested"
'''


async def test_a_full_replica_leaves_the_next_call_to_another(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One call at a time per replica: the replica running the first call has left the queue
    # group, so the second goes to the other. (Sent one after the other, not as a burst: NATS
    # routes a burst at random, and all of it reaches one replica, which then runs it all as
    # designed, once in 2^(n-1) bursts: this test used to fail that way.)
    monkeypatch.setenv("O_SANDBOX_CONCURRENCY", "1")
    replicas = {
        s.replica: s for s in [await start_sandbox(sandbox_nats, monkeypatch) for _ in "ab"]
    }
    inbox = client.nc.new_inbox()
    answers = await client.nc.subscribe(f"{inbox}.*")
    said: dict[str, list[ExecutionState]] = {}

    async def answer(call: str, state: str) -> ExecutionState:
        async with asyncio.timeout(LOST_AFTER):
            while not any(s.state == state for s in said.get(call, [])):
                msg = await answers.next_msg(timeout=LOST_AFTER)
                said.setdefault(msg.subject, []).append(ExecutionState.decode(msg.data))
        return next(s for s in said[call] if s.state == state)

    async def send(call: int, seconds: float) -> str:
        command = tool_command(NAP, "nap", {"seconds": seconds})
        await client.nc.publish(subjects.SANDBOX_RUN, command.encode(), reply=f"{inbox}.{call}")
        taker = (await answer(f"{inbox}.{call}", "running")).replica
        assert taker in replicas, taker
        return taker

    try:
        first = await send(0, 1.0)
        # The full replica queued its leaving (an UNSUB, o_tool_sandbox/service.py) as it said
        # "running": once its connection's PONG is back, NATS has taken that replica out.
        await replicas[first].eventlog.nc.flush()
        second = await send(1, 0.1)
        assert {first, second} == set(replicas)
        for call in (0, 1):
            outcome = (await answer(f"{inbox}.{call}", "done")).outcome
            assert outcome is not None
            event = decode(outcome).data
            assert isinstance(event, ToolExecuted) and event.tool_return == "rested"
    finally:
        await answers.unsubscribe()
        for s in replicas.values():
            await s.stop()


async def test_calls_a_full_replica_was_already_handed_are_answered_not_dropped(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One call at a time: the first call fills the replica, which then leaves the queue
    # group. Calls NATS handed it before it left wait in its connection, and are run too
    # (not dropped unanswered, for their callers to count lost after LOST_AFTER); calls
    # sent after it left find no responders (and would be sent again).
    monkeypatch.setenv("O_SANDBOX_CONCURRENCY", "1")
    service = await start_sandbox(sandbox_nats, monkeypatch)
    inbox = client.nc.new_inbox()
    answers = await client.nc.subscribe(f"{inbox}.*")
    calls = 12
    try:
        for i in range(calls):
            command = tool_command(NAP, "nap", {"seconds": 0.1})
            await client.nc.publish(subjects.SANDBOX_RUN, command.encode(), reply=f"{inbox}.{i}")
            await client.nc.flush()
        ended: dict[str, str] = {}
        async with asyncio.timeout(LOST_AFTER):
            while len(ended) < calls:
                msg = await answers.next_msg(timeout=LOST_AFTER)
                if (msg.headers or {}).get("Status") == "503":
                    ended[msg.subject] = "no responders"
                    continue
                state = ExecutionState.decode(msg.data)
                if state.state == "done":
                    assert state.outcome is not None
                    event = decode(state.outcome).data
                    assert isinstance(event, ToolExecuted) and event.tool_return == "rested"
                    ended[msg.subject] = "ran"
        assert sorted(ended) == sorted(f"{inbox}.{i}" for i in range(calls))
        assert ended[f"{inbox}.0"] == "ran"
    finally:
        await answers.unsubscribe()
        await service.stop()


async def until_running(client: EventLog, execution_id: str) -> str:  # noqa: F811
    """The replica running the execution, once one says it does."""
    question = ExecutionStatus(execution_id=execution_id).encode()
    async with asyncio.timeout(15):
        while True:
            with contextlib.suppress(nats.errors.TimeoutError, nats.errors.NoRespondersError):
                # (Briefly: a question that overtook the call goes unanswered.)
                answer = await client.nc.request(
                    subjects.SANDBOX_EXECUTIONS, question, timeout=0.05
                )
                state = ExecutionState.decode(answer.data)
                if state.state == "running":
                    return state.replica
            await asyncio.sleep(0.02)


async def until_replicas_answer(nats_url: str, count: int) -> None:
    """Return once `count` different replicas have answered (they take calls from then on)."""
    operator = Identity.from_file("operator", seed_file(nats_url, "operator"))
    asking = await EventLog.connect(nats_url, name="asking", identity=operator, jetstream=False)
    seen: set[str] = set()
    try:
        async with asyncio.timeout(30):
            while len(seen) < count:
                with contextlib.suppress(nats.errors.TimeoutError, nats.errors.NoRespondersError):
                    answer = await asking.nc.request(subjects.SANDBOX_CAPABILITIES, b"", timeout=1)
                    seen.add(msgpack.unpackb(answer.data)["replica"])
                await asyncio.sleep(0.02)
    finally:
        await asking.close()


@dataclass
class KilledMidCall:
    result: dict[str, Any]
    # From the SIGKILL of the replica running the call to the call's outcome.
    seconds: float
    events: list[Any]


async def kill_mid_call(client: EventLog, nats_url: str, idempotent: bool) -> KilledMidCall:  # noqa: F811
    """A call whose replica is SIGKILLed while it runs the tool, another replica up."""
    replicas = [await spawn_sandbox(nats_url) for _ in range(2)]
    command = tool_command(NAP, "nap", {"seconds": 2.0}, idempotent=idempotent)
    # Listen for the execution's events first, so its Started event cannot be missed.
    events = await client.nc.subscribe(subjects.tool_execution_subject(command.id))
    try:
        await until_replicas_answer(nats_url, 2)
        outcome = asyncio.create_task(run_tool(client, command, timeout=30))
        first_event = await events.next_msg(timeout=15)
        assert decode(first_event.data).type == "ToolExecutionStarted"
        # Recorded before the call: kill the replica that says it runs the tool (its name
        # holds its pid).
        running_on = await until_running(client, command.id)
        [victim] = [p for p in replicas if f"-{p.pid}-" in running_on]
        loop = asyncio.get_running_loop()
        killed_at = loop.time()
        victim.send_signal(signal.SIGKILL)
        result = await outcome
        seconds = loop.time() - killed_at
        await victim.wait()
        recorded = [r.envelope.data for r in await execution_events(client, command)]
        return KilledMidCall(result, seconds, recorded)
    finally:
        await events.unsubscribe()
        for proc in replicas:
            if proc.returncode is None:
                proc.terminate()
                with contextlib.suppress(ProcessLookupError):
                    await proc.wait()


async def test_a_killed_replica_ends_a_side_effecting_call_with_a_clear_error_at_once(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
) -> None:
    killed = await kill_mid_call(client, sandbox_nats, idempotent=False)
    assert killed.result["status"] == "error"
    assert killed.result["failure"] == "interrupted"
    assert "not declared idempotent" in str(killed.result["tool_return"])
    assert [type(e) for e in killed.events] == [ToolExecutionStarted, ToolExecutionFailed]
    # Its replica's death is noticed within a second (no responders on its liveness
    # subject), not after LOST_AFTER (5 s) of silence.
    assert killed.seconds < 1.0


async def test_a_killed_replica_retries_an_idempotent_tool_once_on_another(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
) -> None:
    killed = await kill_mid_call(client, sandbox_nats, idempotent=True)
    assert (killed.result["status"], killed.result["tool_return"]) == ("success", "rested")
    started = [e for e in killed.events if isinstance(e, ToolExecutionStarted)]
    assert [e.attempt for e in started] == [1, 2]
    [done] = [e for e in killed.events if isinstance(e, ToolExecuted)]
    assert done.attempt == 2
    # Noticed within a second, then the tool's two seconds again on the other replica, with
    # a second to spare for a loaded machine (taken for lost after LOST_AFTER of silence
    # instead, it would be 5 + 2 s).
    assert killed.seconds < 4.0 < LOST_AFTER + 2.0


async def test_a_command_past_its_deadline_is_refused_not_run(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = await start_sandbox(sandbox_nats, monkeypatch)
    try:
        late = tool_command(NAP, "nap", {"seconds": 0})
        late = late.model_copy(
            update={
                "data": late.data.model_copy(
                    update={"deadline": datetime.now(UTC) - timedelta(seconds=1)}
                )
            }
        )
        result = await run_tool(client, late)
        assert (result["status"], result["failure"]) == ("error", "expired")
        events = [r.envelope.data for r in await execution_events(client, late)]
        assert [type(e) for e in events] == [ToolExecutionStarted, ToolExecutionFailed]
        assert not any(isinstance(e, ToolExecuted) for e in events)
    finally:
        await service.stop()


async def test_without_any_sandbox_the_caller_gets_an_error_in_bounded_time(
    sandbox_nats: str,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from o_devtools.embedded import start_servers

    # A NATS with no sandbox at all.
    with start_servers(tmp_path_factory.mktemp("lonely"), need_pg=False) as servers:
        assert servers.nats is not None
        executor = Identity.from_file("executor", servers.nats.seed_file("executor"))
        lonely = await EventLog.connect(servers.nats.url, name="lonely", identity=executor)
        try:
            result = await run_tool(lonely, tool_command(NAP, "nap", {"seconds": 0}), timeout=1)
        finally:
            await lonely.close()
    assert result["status"] == "error" and "did not answer" in result["tool_return"]


async def test_a_frozen_nats_is_an_outage_for_the_caller_not_the_calls_outcome(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # A JetStream request timing out on the way (nats-server unreachable for a moment) is
    # raised for the caller to try again later, as every outage is; it used to be the call's
    # outcome ("did not answer within 30s", after five seconds), which a run then recorded
    # as the tool's error although an idempotent tool would have run (chaos suite).
    from o_devtools.embedded import start_servers

    with start_servers(tmp_path_factory.mktemp("frozen"), need_pg=False) as servers:
        assert servers.nats is not None
        pid = servers.nats.pid
        assert pid is not None
        executor = Identity.from_file("executor", servers.nats.seed_file("executor"))
        caller = await EventLog.connect(servers.nats.url, name="frozen", identity=executor)
        command = tool_command(NAP, "nap", {"seconds": 0}, idempotent=True)
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_stopped(pid)
            asked = time.monotonic()
            with pytest.raises(TimeoutError):
                await run_tool(caller, command, timeout=30)
            assert time.monotonic() - asked < 25  # a request's timeout, not the call's
        finally:
            os.kill(pid, signal.SIGCONT)
            await caller.close()


async def test_a_killed_zygote_is_replaced_and_calls_go_on(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = await start_sandbox(sandbox_nats, monkeypatch)
    try:
        zygote = service.pool._zygote.proc
        assert zygote is not None
        zygote.send_signal(signal.SIGKILL)
        await zygote.wait()
        # Its warm workers died with it; the next calls get fresh ones.
        for _ in range(3):
            result = await run_tool(client, tool_command(NAP, "nap", {"seconds": 0}))
            assert (result["status"], result["tool_return"]) == ("success", "rested")
        assert service.pool._zygote.proc is not zygote
    finally:
        await service.stop()


class _LosesTheOutcome:
    """A call's message whose second answer (the outcome) never reaches the caller, as when
    it is published while NATS restarts; the first (who took it) goes through."""

    def __init__(self, msg: Msg, lost: list[bytes]) -> None:
        self.data, self.reply, self.headers = msg.data, msg.reply, msg.headers
        self._msg, self._lost, self._answered = msg, lost, 0

    async def respond(self, data: bytes) -> None:
        self._answered += 1
        if self._answered == 2:
            self._lost.append(data)
            return
        await self._msg.respond(data)


async def test_an_outcome_lost_on_the_way_is_asked_of_the_replica_that_keeps_it(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Chaos seed 39: NATS restarted just as a replica published a call's outcome. The replica
    # lived on (its liveness subject answered), so the caller waited out its whole budget and
    # recorded "did not answer" for a tool that had run. It now asks the replica, which keeps
    # finished executions, and records the outcome it was sent.
    lost: list[bytes] = []
    taking = ToolSandboxService._on_run

    async def on_run(service: ToolSandboxService, msg: Msg) -> None:
        await taking(service, cast(Msg, _LosesTheOutcome(msg, lost)))

    monkeypatch.setattr(ToolSandboxService, "_on_run", on_run)
    service = await start_sandbox(sandbox_nats, monkeypatch)
    try:
        command = tool_command(NAP, "nap", {"seconds": 0.2})
        # A budget far short of the call's own (wait_budget): only asking can answer in time.
        result = await run_tool(client, command, timeout=LOST_AFTER + 3)
        assert len(lost) == 1  # the replica did answer, and its answer was lost
        assert (result["status"], result["tool_return"]) == ("success", "rested")
        assert result["sandbox"] == service.replica
        events = [r.envelope.data for r in await execution_events(client, command)]
        assert [type(e) for e in events] == [ToolExecutionStarted, ToolExecuted]
    finally:
        await service.stop()
