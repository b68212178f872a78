"""The stdio MCP servers one sandbox replica runs (o_tool_sandbox/mcp_servers.py), on this
host's real confinement, with the tests' MCP server (tests/e2e/mcp_stdio_server.py):
stopped when idle and started again on next use, bounded in number, stopped when they
stop answering, let onto the network only when the operator says so."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from o_contracts.mcp_stdio import StdioServerSpec
from o_runtime.env import Env
from o_tool_sandbox.limits import Limits
from o_tool_sandbox.mcp_process import StdioFailure, StdioProcess
from o_tool_sandbox.mcp_servers import StdioServers
from o_tool_sandbox.mcp_settings import McpStdioSettings
from o_tool_sandbox.pool import WorkerPool
from tests.e2e.mcp_stdio_python import server_python

mcp = pytest.importorskip("mcp", reason="the mcp package is not installed")

SERVER = Path(__file__).resolve().parents[1] / "e2e" / "mcp_stdio_server.py"
DEADLINE = 30.0


@asynccontextmanager
async def sandbox(**settings: str) -> AsyncIterator[StdioServers]:
    env = Env({"O_SANDBOX_POOL": "0", **settings})
    limits = Limits.from_env(env)
    pool = WorkerPool(limits)
    await pool.start()
    servers = StdioServers(McpStdioSettings.from_env(env, limits), pool)
    servers.start()
    try:
        yield servers
    finally:
        await servers.close()
        await pool.close()


def env() -> dict[str, str]:
    return {"PYTHONPATH": server_python()[1]}


def spec(server_id: str | None = None, *flags: str) -> StdioServerSpec:
    return StdioServerSpec(
        mcp_server_id=server_id or f"mcp_server-{uuid.uuid4()}",
        command=server_python()[0],
        args=[str(SERVER), *flags],
    )


async def started(servers: StdioServers, server: StdioServerSpec) -> StdioProcess:
    process = await servers.server(server, env())
    await process.ready(DEADLINE)
    return process


def gone(path: Path) -> bool:
    return not path.exists()


async def echo(process: StdioProcess, text: str = "hi") -> str:
    result = await process.call_tool("echo", {"message": text}, DEADLINE)
    return str(result.content[0].text)


async def test_an_idle_server_is_stopped_and_started_again_on_next_use() -> None:
    async with sandbox(O_MCP_STDIO_IDLE_SECONDS="1") as servers:
        server = spec()
        first = await started(servers, server)
        assert await echo(first) == "hi"
        scratch = Path(first.launch.config["scratch"])
        await asyncio.wait_for(first.finished(), DEADLINE)
        assert first.reason() == "the MCP server was stopped"
        assert gone(scratch) and server.mcp_server_id not in servers.running
        again = await started(servers, server)
        assert again is not first and await echo(again, "back") == "back"


async def test_a_server_slower_to_start_than_the_idle_time_is_not_stopped_while_starting() -> None:
    async with sandbox(O_MCP_STDIO_IDLE_SECONDS="1") as servers:
        process = await started(servers, spec(None, "--start-after", "2.5"))
        assert await echo(process, "late") == "late"
        assert not process.ended


async def test_the_least_recently_used_idle_server_makes_room_for_a_new_one() -> None:
    async with sandbox(O_MCP_STDIO_MAX_SERVERS="2") as servers:
        a, b = spec(), spec()
        first = await started(servers, a)
        second = await started(servers, b)
        assert await echo(first) == "hi"  # `a` was used last
        third = await started(servers, spec())
        await asyncio.wait_for(second.finished(), DEADLINE)
        assert set(servers.running) == {a.mcp_server_id, third.server_id}
        assert not first.ended and await echo(first) == "hi"


async def test_when_every_server_is_busy_a_new_one_is_refused() -> None:
    async with sandbox(O_MCP_STDIO_MAX_SERVERS="1") as servers:
        busy = await started(servers, spec())
        held = asyncio.create_task(busy.call_tool("hang", {}, 3))
        await asyncio.sleep(0)  # one loop turn: the call is sent
        assert busy.in_flight == 1
        with pytest.raises(StdioFailure, match="already runs 1 stdio MCP servers, all busy"):
            await servers.server(spec(), env())
        with pytest.raises(StdioFailure, match="no answer within 3 s"):
            await held
        # Free again: the next one takes its place.
        assert await echo(await started(servers, spec())) == "hi"


async def test_a_server_that_stops_answering_is_stopped() -> None:
    async with sandbox() as servers:
        server = spec()
        frozen = await started(servers, server)
        with pytest.raises(StdioFailure, match="no answer within 1 s"):
            await frozen.call_tool("freeze", {}, 1)
        # It does not answer a ping either: stopped, and started afresh on next use.
        await asyncio.wait_for(frozen.finished(), DEADLINE)
        assert frozen.reason().startswith("the MCP server stopped answering (no ping within")
        assert await echo(await started(servers, server)) == "hi"


@pytest.mark.parametrize("allowed", [False, True])
async def test_the_network_is_reachable_only_where_the_operator_allows_it(
    allowed: bool,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        async with sandbox(O_MCP_STDIO_NETWORK="1" if allowed else "0") as servers:
            process = await started(servers, spec())
            result = await process.call_tool("reach", {"host": "127.0.0.1", "port": port}, 10)
    said = str(result.content[0].text)
    if allowed:
        assert said == "connected"
    else:
        assert said.startswith("blocked: PermissionError"), said


async def test_servers_stop_with_the_sandbox_and_leave_nothing_behind() -> None:
    async with sandbox() as servers:
        processes = [await started(servers, spec()) for _ in range(2)]
        scratches = [Path(p.launch.config["scratch"]) for p in processes]
        uids = {p.launch.config["uid"] for p in processes}
        await servers.close()
        assert all(p.ended for p in processes)
        assert all(gone(s) for s in scratches)
        if os.geteuid() == 0:
            assert len(uids) == 2 and not uids & servers.pool._uids
