"""Several sandbox replicas share the work; a replica killed mid-call never hangs the caller:
the call fails clearly, or an idempotent tool is retried once."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from datetime import UTC, datetime, timedelta

import nats.errors
import pytest

from o_contracts import subjects
from o_contracts.envelope import decode
from o_contracts.events import ToolExecuted, ToolExecutionFailed, ToolExecutionStarted
from o_contracts.requests import ExecutionState, ExecutionStatus
from o_runtime.eventlog import EventLog
from o_runtime.nats_identity import Identity
from tests.integration.sandbox_support import (
    client,  # noqa: F401
    execution_events,
    run_tool,
    sandbox_nats,  # noqa: F401
    spawn_sandbox,
    start_sandbox,
    tool_command,
)

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


async def test_replicas_share_the_work(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two calls at a time per replica: eight calls cannot all wait for one of them.
    monkeypatch.setenv("O_SANDBOX_CONCURRENCY", "2")
    replicas = [await start_sandbox(sandbox_nats, monkeypatch) for _ in range(2)]
    try:
        results = await asyncio.gather(
            *(run_tool(client, tool_command(NAP, "nap", {"seconds": 0.3})) for _ in range(8))
        )
        assert {r["status"] for r in results} == {"success"}
        assert {r["sandbox"] for r in results} == {s.replica for s in replicas}
    finally:
        for s in replicas:
            await s.stop()


async def until_running(client: EventLog, execution_id: str) -> None:  # noqa: F811
    question = ExecutionStatus(execution_id=execution_id).encode()
    async with asyncio.timeout(15):
        while True:
            with contextlib.suppress(nats.errors.TimeoutError, nats.errors.NoRespondersError):
                answer = await client.nc.request(subjects.SANDBOX_EXECUTIONS, question, timeout=1)
                if ExecutionState.decode(answer.data).state == "running":
                    return
            await asyncio.sleep(0.02)


async def kill_mid_call(client: EventLog, nats_url: str, idempotent: bool) -> dict[str, object]:  # noqa: F811
    first = await spawn_sandbox(nats_url)
    second = None
    command = tool_command(NAP, "nap", {"seconds": 1.0}, idempotent=idempotent)
    # Listen for the execution's events first, so its Started event cannot be missed.
    events = await client.nc.subscribe(subjects.tool_execution_subject(command.id))
    try:
        outcome = asyncio.create_task(run_tool(client, command, timeout=30))
        first_event = await events.next_msg(timeout=15)
        assert decode(first_event.data).type == "ToolExecutionStarted"
        # Recorded before the call: kill once the replica says it runs the tool.
        await until_running(client, command.id)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        second = await spawn_sandbox(nats_url)
        result = await outcome
        return result
    finally:
        await events.unsubscribe()
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.terminate()
                with contextlib.suppress(ProcessLookupError):
                    await proc.wait()


async def test_a_killed_replica_ends_a_side_effecting_call_with_a_clear_error(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
) -> None:
    result = await kill_mid_call(client, sandbox_nats, idempotent=False)
    assert result["status"] == "error"
    assert result["failure"] == "interrupted"
    assert "not declared idempotent" in str(result["tool_return"])


async def test_a_killed_replica_retries_an_idempotent_tool_once(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
) -> None:
    result = await kill_mid_call(client, sandbox_nats, idempotent=True)
    assert (result["status"], result["tool_return"]) == ("success", "rested")


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
