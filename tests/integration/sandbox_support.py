"""A sandbox of its own for tests: a private NATS server (so no other sandbox in the
session competes for its calls), sandbox services in this process or as child processes
(each as the tool_sandbox role), and a caller that asks for tool runs as the executor does
(as the executor role)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from o_contracts import subjects
from o_contracts.commands import RunTool
from o_contracts.envelope import Envelope, decode
from o_contracts.ids import new_id
from o_contracts.pip_requirements import PipRequirement
from o_devtools.embedded import EmbeddedNats, start_servers
from o_executor.sandbox_calls import request_execution
from o_runtime.eventlog import EventLog, Recorded
from o_runtime.nats_identity import NKEY_ENV, Identity
from o_runtime.settings import Settings
from o_tool_sandbox.service import ToolSandboxService

ROOT = Path(__file__).resolve().parents[2]
LIMITS = {
    "O_SANDBOX_TIMEOUT": "4",
    "O_SANDBOX_CPU_SECONDS": "1",
    "O_SANDBOX_MEMORY_MB": "256",
    "O_SANDBOX_OUTPUT_MAX_MB": "1",
    "O_SANDBOX_POOL": "2",
}


# The sandbox NATS servers of this session, by url (their identities: o_setup).
_SERVERS: dict[str, EmbeddedNats] = {}


@pytest.fixture(scope="module")
def sandbox_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with start_servers(tmp_path_factory.mktemp("sandbox-nats"), need_pg=False) as servers:
        assert servers.nats is not None
        _SERVERS[servers.nats.url] = servers.nats
        yield servers.nats.url
        del _SERVERS[servers.nats.url]


def seed_file(nats_url: str, role: str) -> Path:
    return _SERVERS[nats_url].seed_file(role)


async def connect_as_executor(nats_url: str, name: str = "test-executor") -> EventLog:
    """Connected as the executor is: the one identity that records executions."""
    identity = Identity.from_file("executor", seed_file(nats_url, "executor"))
    return await EventLog.connect(nats_url, name=name, identity=identity)


@pytest.fixture
async def client(sandbox_nats: str) -> AsyncIterator[EventLog]:
    log = await connect_as_executor(sandbox_nats)
    yield log
    await log.close()


async def start_sandbox(
    nats_url: str, monkeypatch: pytest.MonkeyPatch, settings: Mapping[str, str | None] = {}
) -> ToolSandboxService:
    """A sandbox with the tests' LIMITS, then `settings` (None: the variable unset)."""
    for key, value in {**LIMITS, **settings}.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    identity = Identity.from_file("tool_sandbox", seed_file(nats_url, "tool_sandbox"))
    service = ToolSandboxService(
        Settings(nats_url, "", "tool_sandbox", None, "WARNING", identity=identity)
    )
    await service.start()
    return service


@asynccontextmanager
async def sandbox_with(
    nats_url: str, monkeypatch: pytest.MonkeyPatch, **settings: str | None
) -> AsyncIterator[ToolSandboxService]:
    """A sandbox started with these settings (None: the variable unset; they win over the
    tests' LIMITS), stopped on exit."""
    service = await start_sandbox(nats_url, monkeypatch, settings)
    try:
        yield service
    finally:
        await service.stop()


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
        NKEY_ENV: str(seed_file(nats_url, "tool_sandbox")),
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
    requirements: list[PipRequirement] | None = None,
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
            requirements=requirements or [],
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
