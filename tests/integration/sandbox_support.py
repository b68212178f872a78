"""A sandbox of its own for tests: a private NATS server (so no other sandbox in the
session competes for its commands), sandbox services in this process or as
child processes, and a sender that asks for tool runs the way the executor does."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from o_contracts import subjects
from o_contracts.base import Reply
from o_contracts.commands import RunTool
from o_contracts.envelope import Envelope, decode
from o_contracts.ids import new_id
from o_devtools.embedded import start_servers
from o_executor.sandbox_calls import request_execution
from o_runtime.commands import send_and_wait
from o_runtime.eventlog import EventLog, Recorded
from o_runtime.settings import Settings
from o_tool_sandbox.service import ToolSandboxService

ROOT = Path(__file__).resolve().parents[2]
LIMITS = {
    "O_SANDBOX_TIMEOUT": "4",
    "O_SANDBOX_CPU_SECONDS": "1",
    "O_SANDBOX_MEMORY_MB": "256",
    "O_SANDBOX_OUTPUT_MAX_MB": "1",
    "O_SANDBOX_POOL": "2",
    "O_SANDBOX_ACK_WAIT": "2",
}


@pytest.fixture(scope="module")
def sandbox_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with start_servers(tmp_path_factory.mktemp("sandbox-nats"), need_pg=False) as servers:
        assert servers.nats is not None
        yield servers.nats.url


@pytest.fixture
async def client(sandbox_nats: str) -> AsyncIterator[EventLog]:
    log = await EventLog.connect(sandbox_nats, name="test-executor")
    yield log
    await log.close()


async def start_sandbox(nats_url: str, monkeypatch: pytest.MonkeyPatch) -> ToolSandboxService:
    for key, value in LIMITS.items():
        monkeypatch.setenv(key, value)
    service = ToolSandboxService(Settings(nats_url, "", "tool_sandbox", None, "WARNING"))
    await service.start()
    return service


@pytest.fixture
async def sandbox(
    sandbox_nats: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ToolSandboxService]:
    service = await start_sandbox(sandbox_nats, monkeypatch)
    yield service
    await service.stop()


def sandbox_process_env(nats_url: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        **LIMITS,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("contracts", "services", ".")),
        "NATS_URL": nats_url,
        "O_LOG_LEVEL": "WARNING",
        **extra,
    }


async def spawn_sandbox(nats_url: str, **extra: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "o_tool_sandbox", env=sandbox_process_env(nats_url, **extra)
    )


def tool_command(
    source: str,
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    agent_id: str | None = None,
    idempotent: bool = False,
    timeout: float = 4.0,
    secrets: dict[str, str] | None = None,
) -> Envelope[RunTool]:
    agent_id = agent_id or new_id("agent")
    return Envelope.wrap(
        RunTool(
            agent_id=agent_id,
            run_id=new_id("run"),
            tool_call_id="call_1",
            tool_id=new_id("tool"),
            tool_name=name,
            source_code=source,
            arguments=arguments or {},
            encrypted_secrets=secrets or {},
            timeout=timeout,
            idempotent=idempotent,
            deadline=datetime.now(UTC) + timedelta(seconds=60),
        ),
        aggregate_id=agent_id,
        producer="test",
        id=new_id("cmd"),
    )


async def run_tool(
    client: EventLog, command: Envelope[RunTool], timeout: float = 30.0
) -> dict[str, Any]:
    """As the executor asks: send, then wait for the outcome event."""
    return await request_execution(client, command, timeout)


async def run_tool_with_reply(
    client: EventLog, command: Envelope[RunTool], timeout: float = 30.0
) -> Reply:
    """As another system may ask: with O-Reply-To."""
    return await send_and_wait(
        client, subjects.sandbox_command_subject(command.data.agent_id), command, timeout=timeout
    )


async def execution_events(client: EventLog, command: Envelope[RunTool]) -> list[Recorded]:
    """The execution's events once its outcome is stored.

    run_tool returns when the outcome reaches a core NATS subscriber, which can
    be a moment before the stream has stored it: read once the stream has it.
    """
    async with asyncio.timeout(10):
        while True:
            if await last_event_type(client, command) in ("ToolExecuted", "ToolExecutionFailed"):
                break
            await asyncio.sleep(0.01)
    return await client.read_subject(subjects.tool_execution_subject(command.id))


async def last_event_type(client: EventLog, command: Envelope[RunTool]) -> str | None:
    from nats.js.errors import NotFoundError

    try:
        msg = await client.js.get_last_msg(
            subjects.EVENTS_STREAM, subjects.tool_execution_subject(command.id)
        )
    except NotFoundError:
        return None
    return decode(msg.data or b"").type
