"""Hostile tools against the real sandbox: each is contained, comes back as a tool error
with a reason, and the sandbox goes on serving the next call."""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from o_contracts.events import ToolExecuted, ToolExecutionFailed, ToolExecutionStarted
from o_runtime.eventlog import EventLog
from o_tool_sandbox.service import ToolSandboxService
from tests.integration.sandbox_support import (
    client,  # noqa: F401
    execution_events,
    run_tool,
    sandbox,  # noqa: F401
    sandbox_nats,  # noqa: F401
    sandbox_with,
    tool_command,
)
from tests.servers import Servers

ECHO = '''
def echo(text: str) -> str:
    """Echo.

    Args:
        text: Text.
    """
    print("said", text)
    return text.upper()
'''


THIS_FILE = str(Path(__file__).resolve())


def exists(path: str) -> bool:
    return Path(path).exists()


async def still_serves(client: EventLog) -> None:  # noqa: F811
    result = await run_tool(client, tool_command(ECHO, "echo", {"text": "hi"}))
    assert (result["status"], result["tool_return"], result["stdout"]) == (
        "success",
        "HI",
        ["said hi"],
    )


async def attack(client: EventLog, body: str, **args: Any) -> dict[str, Any]:  # noqa: F811
    source = (
        "import os, sys, socket, signal, time\n\ndef attack("
        + ", ".join(f"{k}: {type(v).__name__}" for k, v in args.items())
        + "):\n"
        + "".join(f"    {line}\n" for line in body.strip().splitlines())
    )
    command = tool_command(source, "attack", args)
    result = await run_tool(client, command)
    events = [r.envelope.data for r in await execution_events(client, command)]
    assert isinstance(events[0], ToolExecutionStarted)
    assert len(events) == 2 and isinstance(events[1], ToolExecuted | ToolExecutionFailed)
    await still_serves(client)
    return result


async def test_a_tool_runs_and_its_outcome_is_recorded(
    client: EventLog,  # noqa: F811
    sandbox: ToolSandboxService,  # noqa: F811
) -> None:
    command = tool_command(ECHO, "echo", {"text": "hello"})
    result = await run_tool(client, command)
    assert result["status"] == "success" and result["tool_return"] == "HELLO"
    started, done = [r.envelope.data for r in await execution_events(client, command)]
    assert isinstance(done, ToolExecuted) and done.stdout == ["said hello"]
    # The executor records the execution; the replica that ran it is named in the outcome.
    assert (started.sandbox, done.sandbox) == ("", sandbox.replica)
    # Asked again (a resumed run asks for the same execution): answered from the record.
    assert await run_tool(client, command) == result
    assert len(await execution_events(client, command)) == 2


async def test_an_exception_is_an_error_with_the_tool_frames(
    client: EventLog,  # noqa: F811
    sandbox: ToolSandboxService,  # noqa: F811
) -> None:
    result = await attack(client, "raise ValueError('no such city')")
    assert result["status"] == "error"
    assert result["failure"] == "exception"
    assert "ValueError: no such city" in result["tool_return"]
    assert "worker.py" not in result["tool_return"]


async def test_infinite_loop_hits_the_cpu_limit(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The limit under test is the CPU one: the wall clock's is set out of its way (the tests'
    # 4 s would come first were the tool given less than a quarter of a core meanwhile).
    async with sandbox_with(sandbox_nats, monkeypatch, O_SANDBOX_TIMEOUT="20"):
        result = await attack(client, "while True:\n    pass")
    assert (result["status"], result["failure"]) == ("error", "cpu_limit")


async def test_sleeping_forever_hits_the_wall_clock_limit(
    client: EventLog,  # noqa: F811
    sandbox: ToolSandboxService,  # noqa: F811
) -> None:
    result = await attack(client, "time.sleep(3600)")
    assert (result["status"], result["failure"]) == ("error", "timeout")


async def test_memory_bomb_hits_the_address_space_limit(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Filling ~200 MB takes ~0.2 s of CPU here, and once in CI (a machine whose hypervisor took
    # a quarter of its time) more than the tests' 1 s: the limit under test is the memory one,
    # so the CPU one is set out of its way.
    async with sandbox_with(sandbox_nats, monkeypatch, O_SANDBOX_CPU_SECONDS="20"):
        result = await attack(
            client, "hog = []\nwhile True:\n    hog.append(bytearray(50 * 2**20))"
        )
    assert (result["status"], result["failure"]) == ("error", "memory_limit")


async def test_fork_bomb_hits_the_process_limit(
    client: EventLog,  # noqa: F811
    sandbox: ToolSandboxService,  # noqa: F811
) -> None:
    result = await attack(client, "while True:\n    os.fork()")
    assert result["status"] == "error"
    assert "BlockingIOError" in result["tool_return"] or result["failure"] != "exception"


async def test_writing_outside_the_scratch_directory_is_denied(
    client: EventLog,  # noqa: F811
    sandbox: ToolSandboxService,  # noqa: F811
    tmp_path: Path,
) -> None:
    target = tmp_path / "escaped.txt"
    os.chmod(tmp_path, 0o777)  # even a world-writable folder is out of reach
    escape_tmp = Path("/tmp") / f"o-escape-{uuid.uuid4().hex}"
    for path in (target, escape_tmp):
        result = await attack(client, "open(path, 'w').write('pwned')", path=str(path))
        assert result["status"] == "error" and "PermissionError" in result["tool_return"]
        assert not path.exists()
    # Its own scratch directory is writable, and gone afterwards.
    result = await attack(
        client, "open('notes.txt', 'w').write('ok')\nreturn os.getcwd()", unused=""
    )
    assert result["status"] == "success"
    assert not exists(result["tool_return"])


async def test_o_environment_is_not_visible(
    client: EventLog,  # noqa: F811
    sandbox: ToolSandboxService,  # noqa: F811
) -> None:
    # A variable of O's process, as NATS_URL or O_SECRETS_KEY would be.
    os.environ["O_CANARY"] = "canary-value"
    try:
        result = await attack(client, "return os.environ['O_CANARY']", unused="")
        assert result["status"] == "error" and "KeyError" in result["tool_return"]
        env = await attack(client, "return sorted(os.environ)", unused="")
        assert env["status"] == "success"
        # (and, as Letta's tools get them, which agent and tool the run is for)
        assert set(json.loads(env["tool_return"])) == {
            "PATH",
            "HOME",
            "TMPDIR",
            "LANG",
            "LETTA_AGENT_ID",
            "LETTA_TOOL_ID",
        }
        # Nor O's files: the checkout (code, ./data) is outside what a tool may read.
        files = await attack(client, "return open(path).read()[:20]", path=THIS_FILE)
        assert files["status"] == "error" and "PermissionError" in files["tool_return"]
        proc = await attack(
            client, "return open(f'/proc/{pid}/environ', 'rb').read().decode()", pid=os.getpid()
        )
        assert proc["status"] == "error" and "canary-value" not in str(proc)
    finally:
        del os.environ["O_CANARY"]


def _postgres_socket(database_url: str) -> str | None:
    parsed = urlparse(database_url)
    host = parse_qs(parsed.query).get("host", [None])[0]
    return f"{host}/.s.PGSQL.{parsed.port or 5432}" if host else None


async def test_connecting_to_nats_postgres_and_http_is_refused(
    client: EventLog,  # noqa: F811
    sandbox: ToolSandboxService,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
    servers: Servers,
) -> None:
    http = socket.socket()
    http.bind(("127.0.0.1", 0))
    http.listen()
    nats_port = int(urlparse(sandbox_nats).port or 4222)
    pg = urlparse(servers.database_url)
    try:
        for port in (nats_port, http.getsockname()[1], pg.port or 5432):
            result = await attack(
                client,
                "socket.create_connection(('127.0.0.1', port), timeout=2)\nreturn 'connected'",
                port=port,
            )
            assert result["status"] == "error", result
            assert "Operation not permitted" in result["tool_return"]
        path = _postgres_socket(servers.database_url)
        if path:
            result = await attack(
                client,
                "s = socket.socket(socket.AF_UNIX)\ns.connect(path)\nreturn 'connected'",
                path=path,
            )
            assert result["status"] == "error" and "connected" not in result["tool_return"]
    finally:
        http.close()


async def test_signalling_o_processes_is_refused(
    client: EventLog,  # noqa: F811
    sandbox: ToolSandboxService,  # noqa: F811
) -> None:
    me = os.getpid()  # this process runs the sandbox service
    result = await attack(client, "os.kill(pid, signal.SIGKILL)", pid=me)
    assert result["status"] == "error"
    assert (
        "PermissionError" in result["tool_return"] or "ProcessLookupError" in result["tool_return"]
    )
    # Its process group and "every process it may signal" reach only its own sandbox
    # (attack() then checks the sandbox still serves).
    group = await attack(
        client, "os.kill(-1, signal.SIGKILL)\nos.kill(0, signal.SIGKILL)\nreturn 'alive'", unused=""
    )
    assert group["status"] == "error" or group["tool_return"] == "alive"


async def test_gigabytes_of_stdout_are_cut_off(
    client: EventLog,  # noqa: F811
    sandbox: ToolSandboxService,  # noqa: F811
) -> None:
    result = await attack(
        client, "chunk = 'x' * 2**20\nfor _ in range(4096):\n    sys.stdout.write(chunk)", unused=""
    )
    assert (result["status"], result["failure"]) == ("error", "output_limit")
    assert sum(len(line) for line in result["stdout"]) < 100_000


async def test_health_report_names_the_isolation(
    sandbox: ToolSandboxService,  # noqa: F811
) -> None:
    report = sandbox.report()
    if os.geteuid() == 0:
        assert report["network"] == "network namespace + seccomp (no sockets)"
        assert report["pid_namespace"] is True
        assert str(report["user"]).startswith("separate uid")
    assert str(report["filesystem"]).startswith("landlock")


async def test_a_huge_return_value_is_cut_not_fatal(
    client: EventLog,  # noqa: F811
    sandbox: ToolSandboxService,  # noqa: F811
) -> None:
    result = await attack(client, "return 'y' * (20 * 2**20)", unused="")
    assert result["status"] == "success"
    assert len(result["tool_return"]) < 60_000  # the tool's return_char_limit (50000)
    assert "truncated" in result["tool_return"]
