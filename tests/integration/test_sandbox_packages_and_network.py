"""A tool's packages (`pip_requirements`) and, when the operator lets tools out, the network,
against the real sandbox: real pip installing a wheel from a local folder (no index), the
real kernel's confinement."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from o_contracts.pip_requirements import PipRequirement
from o_runtime.eventlog import EventLog
from o_tool_sandbox.packages import COMPLETE, Packages
from o_tool_sandbox.service import ToolSandboxService
from tests.fakes.wheels import make_wheel
from tests.integration.sandbox_support import (
    client,  # noqa: F401
    run_tool,
    sandbox_nats,  # noqa: F401
    sandbox_with,
    start_sandbox,
    tool_command,
)

GREET = '''
def greet(name: str) -> str:
    """Greet.

    Args:
        name: Who.
    """
    import otestgreeting
    return otestgreeting.greeting(name)
'''

WRITE_INTO = '''
def write_into(name: str) -> str:
    """Write next to the package.

    Args:
        name: A file name.
    """
    import os, otestgreeting
    folder = os.path.dirname(otestgreeting.__file__)
    with open(os.path.join(folder, name), "w") as f:
        f.write("planted")
    return "written"
'''

CONNECT = '''
def connect(port: int, family: str) -> str:
    """Connect.

    Args:
        port: A TCP port on this host.
        family: inet, inet by name (localhost, as the host's files resolve it) or unix.
    """
    import socket
    if family == "unix":
        socket.socket(socket.AF_UNIX)
        return "unix socket made"
    host = "localhost" if family == "name" else "127.0.0.1"
    with socket.create_connection((host, port), timeout=3) as s:
        return "connected"
'''

OTESTGREETING = [PipRequirement(name="otestgreeting", version="1.0")]


@pytest.fixture(scope="module")
def wheels() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="o-test-wheels-"))
    make_wheel(folder, "otestgreeting", "1.0", "def greeting(name):\n    return f'hello, {name}'\n")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def packages_root() -> Iterator[Path]:
    # Not under pytest's tmp_path (mode 0700): the tools' uids must be able to read it.
    root = Path(tempfile.mkdtemp(prefix="o-test-packages-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def sandbox(
    sandbox_nats: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    wheels: Path,
    packages_root: Path,
) -> AsyncIterator[ToolSandboxService]:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("O_SANDBOX_PACKAGES_DIR", str(packages_root))
    service = await start_sandbox(sandbox_nats, monkeypatch)
    yield service
    await service.stop()


def installed_sets(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if not p.name.startswith(".")]


def installed_sets_all(root: Path) -> list[str]:
    return [p.name for p in root.iterdir()]


async def test_a_tools_package_is_installed_once_and_imported(
    client: EventLog,  # noqa: F811
    sandbox: ToolSandboxService,
    packages_root: Path,
) -> None:
    command = tool_command(GREET, "greet", {"name": "ada"}, requirements=OTESTGREETING)
    result = await run_tool(client, command)
    assert (result["status"], result["tool_return"]) == ("success", "hello, ada"), result
    [installed] = installed_sets(packages_root)
    marker = (installed / COMPLETE).stat().st_mtime_ns
    # The same set again: found, not installed again.
    again = await run_tool(
        client, tool_command(GREET, "greet", {"name": "bob"}, requirements=OTESTGREETING)
    )
    assert again["tool_return"] == "hello, bob"
    assert installed_sets(packages_root) == [installed]
    assert (installed / COMPLETE).stat().st_mtime_ns == marker
    # Without the requirement the package is not on the tool's path.
    bare = await run_tool(client, tool_command(GREET, "greet", {"name": "cy"}))
    assert bare["status"] == "error"
    assert "No module named 'otestgreeting'" in bare["tool_return"]
    # And no tool can change what another imports.
    planted = await run_tool(
        client, tool_command(WRITE_INTO, "write_into", {"name": "x.py"}, requirements=OTESTGREETING)
    )
    assert planted["status"] == "error", planted
    assert not (installed / "x.py").exists()


async def test_a_package_that_cannot_be_installed_is_a_tool_error_saying_why(
    client: EventLog,  # noqa: F811
    sandbox: ToolSandboxService,
    packages_root: Path,
) -> None:
    missing = [PipRequirement(name="otest-no-such-package", version="9.9")]
    result = await run_tool(
        client, tool_command(GREET, "greet", {"name": "x"}, requirements=missing)
    )
    assert result["status"] == "error"
    assert "pip could not install otest-no-such-package==9.9" in result["tool_return"]
    assert installed_sets(packages_root) == []
    assert not [p for p in installed_sets_all(packages_root) if p.startswith(".installing-")]


async def test_packages_off_says_so(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with sandbox_with(sandbox_nats, monkeypatch, O_SANDBOX_PACKAGES="0") as service:
        result = await run_tool(
            client, tool_command(GREET, "greet", {"name": "x"}, requirements=OTESTGREETING)
        )
        assert result["status"] == "error"
        assert "does not install packages: off (O_SANDBOX_PACKAGES=0)" in result["tool_return"]
        assert service.report()["packages"] == "off (O_SANDBOX_PACKAGES=0)"


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


async def test_let_out_a_tool_reaches_the_ports_named_and_no_other(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    listener: int,
) -> None:
    async with sandbox_with(sandbox_nats, monkeypatch, O_SANDBOX_NETWORK=str(listener)) as service:
        assert (
            service.report()["network"] == f"IPv4/IPv6 to TCP ports {listener} (O_SANDBOX_NETWORK)"
        )
        allowed = await run_tool(
            client, tool_command(CONNECT, "connect", {"port": listener, "family": "inet"})
        )
        assert (allowed["status"], allowed["tool_return"]) == ("success", "connected"), allowed
        # By name: the resolver's files (/etc/hosts, nsswitch.conf) are readable when let out.
        by_name = await run_tool(
            client, tool_command(CONNECT, "connect", {"port": listener, "family": "name"})
        )
        assert (by_name["status"], by_name["tool_return"]) == ("success", "connected"), by_name
        # NATS' port is not one named: Landlock refuses the connect.
        nats_port = int(urlparse(sandbox_nats).port or 4222)
        refused = await run_tool(
            client, tool_command(CONNECT, "connect", {"port": nats_port, "family": "inet"})
        )
        assert refused["status"] == "error"
        assert "Permission denied" in refused["tool_return"], refused
        # Unix sockets stay closed (local services by path, abstract sockets).
        unix = await run_tool(
            client, tool_command(CONNECT, "connect", {"port": 0, "family": "unix"})
        )
        assert unix["status"] == "error"
        assert "Operation not permitted" in unix["tool_return"], unix


async def test_by_default_a_tool_reaches_no_port(
    client: EventLog,  # noqa: F811
    sandbox_nats: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    listener: int,
) -> None:
    async with sandbox_with(sandbox_nats, monkeypatch, O_SANDBOX_NETWORK=None) as service:
        result = await run_tool(
            client, tool_command(CONNECT, "connect", {"port": listener, "family": "inet"})
        )
        assert result["status"] == "error"
        assert "Operation not permitted" in result["tool_return"], result
        assert "no sockets" in str(service.report()["network"])


async def test_past_the_limit_the_set_least_recently_used_goes_but_never_one_in_use(
    wheels: Path, packages_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    padding = "PAD = '" + "x" * 600_000 + "'\n"
    for name in ("otestbulka", "otestbulkb"):
        make_wheel(wheels, name, "1.0", padding)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    a = [PipRequirement(name="otestbulka")]
    b = [PipRequirement(name="otestbulkb")]
    # Every set counts as in use (used within the hour): over the limit, none goes.
    kept = Packages(packages_root, sys.executable, True, 120, max_bytes=1 << 20, idle_seconds=3600)
    first = await kept.path_for(a)
    second = await kept.path_for(b)
    assert {Path(first or ""), Path(second or "")} == set(installed_sets(packages_root))
    # Sets unused for long enough: the least recently used goes (b: a was used after it),
    # until all fit; the one just made stays.
    now = time.time()
    os.utime(Path(second or "") / COMPLETE, (now - 900, now - 900))
    os.utime(Path(first or "") / COMPLETE, (now - 300, now - 300))
    lean = Packages(packages_root, sys.executable, True, 120, max_bytes=3 << 19, idle_seconds=0)
    third = await lean.path_for([PipRequirement(name="otestgreeting", version="1.0")])
    assert set(installed_sets(packages_root)) == {Path(first or ""), Path(third or "")}
