"""What the sandbox decides before it starts a stdio MCP server: which command it
execs, what the server may read, what it runs with, when it is started again, and
what a request to it must say (o_tool_sandbox/mcp_paths.py, mcp_servers.py,
o_contracts/mcp_stdio.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from o_contracts.mcp_stdio import McpStdioRequest, StdioServerSpec
from o_tool_sandbox import mcp_paths
from o_tool_sandbox.mcp_servers import fingerprint, server_env


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_command_is_found_on_the_servers_own_path(tmp_path: Path) -> None:
    tool = executable(tmp_path / "venv" / "bin" / "my-server")
    found = mcp_paths.resolve_command("my-server", {"PATH": str(tool.parent)})
    assert found == str(tool)


def test_a_command_not_on_the_path_is_refused_with_what_was_searched(tmp_path: Path) -> None:
    with pytest.raises(mcp_paths.CommandNotFound) as caught:
        mcp_paths.resolve_command("nowhere-server", {"PATH": str(tmp_path)})
    assert str(caught.value) == f"command not found: nowhere-server (PATH={tmp_path})"


def test_the_server_may_read_its_installation_and_the_folders_its_arguments_name(
    tmp_path: Path,
) -> None:
    tool = executable(tmp_path / "venv" / "bin" / "python")
    script = tmp_path / "app" / "server.py"
    script.parent.mkdir()
    script.write_text("")
    config = tmp_path / "conf"
    config.mkdir()
    paths = mcp_paths.read_paths(
        str(tool),
        [str(script), "--verbose"],
        {"CONFIG_DIR": str(config), "TOKEN": "/not/a/real/path"},
        base=[],
        extra=[],
        private=[],
    )
    assert str(tmp_path / "venv") in paths
    assert str(tmp_path / "app") in paths
    assert str(config) in paths
    assert "/not/a/real/path" not in paths
    assert "/usr" in paths


def test_the_folders_of_o_are_never_opened_to_a_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    key = data / "secrets.key"
    data.mkdir()
    key.write_text("k")
    tool = executable(data / "bin" / "server")
    paths = mcp_paths.read_paths(
        str(tool),
        [str(key), str(tmp_path)],  # a file inside O's data, and a folder holding it
        {},
        base=[],
        extra=[],
        private=[str(data)],
    )
    assert not [p for p in paths if p == str(tmp_path) or p.startswith(str(data))]


def test_a_file_inside_a_private_folders_parent_is_given_alone(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    script = tmp_path / "server.py"  # beside O's data folder: its folder holds the data
    script.write_text("")
    paths = mcp_paths.read_paths(
        "/usr/bin/env", [str(script)], {}, base=[], extra=[], private=[str(data)]
    )
    assert str(script) in paths and str(tmp_path) not in paths


def test_the_servers_environment_is_a_clean_base_under_its_own() -> None:
    env = server_env("/tmp/s", {"API_KEY": "x", "PATH": "/opt/bin"})
    assert env == {
        "PATH": "/opt/bin",
        "HOME": "/tmp/s",
        "TMPDIR": "/tmp/s",
        "LANG": "C.UTF-8",
        "API_KEY": "x",
    }
    assert server_env("/tmp/s", {}).keys() == {"PATH", "HOME", "TMPDIR", "LANG"}


def test_a_change_of_command_arguments_or_environment_restarts_the_server() -> None:
    spec = StdioServerSpec(mcp_server_id="m", command="python", args=["a.py"])
    same = StdioServerSpec(mcp_server_id="m", command="python", args=["a.py"])
    assert fingerprint(spec) == fingerprint(same)
    for changed in (
        spec.model_copy(update={"command": "python3"}),
        spec.model_copy(update={"args": ["b.py"]}),
        spec.model_copy(update={"encrypted_env": {"A": "gAAAA"}}),
    ):
        assert fingerprint(changed) != fingerprint(spec)


def test_a_request_round_trips_and_a_call_must_name_its_tool() -> None:
    request = McpStdioRequest(
        server=StdioServerSpec(mcp_server_id="m", command="python", encrypted_env={"K": "c"}),
        operation="call_tool",
        tool_name="echo",
        arguments={"message": "hi"},
        timeout=12,
    )
    assert McpStdioRequest.decode(request.encode()) == request
    with pytest.raises(ValidationError, match="call_tool needs a tool_name"):
        McpStdioRequest(server=request.server, operation="call_tool")
    with pytest.raises(ValidationError):
        McpStdioRequest(server=request.server, operation="list_tools", timeout=0)


def test_a_command_inside_os_own_folders_is_out_of_reach_and_says_where(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tool = executable(home / "venv" / "bin" / "python")
    reason = mcp_paths.out_of_reach(str(tool), [], base=[], private=[str(home)], uid=None)
    assert reason == (
        f"its command, {tool}, is inside {home}, one of O's own folders (the sandbox"
        " service's home or data), which stdio MCP servers may never read; install the"
        " server elsewhere, such as /opt or /usr/local"
    )
    # The sandbox's own interpreter is read from there all the same (its `base`).
    assert (
        mcp_paths.out_of_reach(str(tool), [], base=[str(home)], private=[str(home)], uid=None)
        is None
    )


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder every user may enter, all the way from / (pytest's own are 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="o-reach-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_under_its_own_uid_a_folder_closed_to_others_is_named_with_its_mode(
    open_tmp: Path,
) -> None:
    tmp_path = open_tmp
    tool = executable(tmp_path / "opt" / "bin" / "server")
    closed = tmp_path / "private"
    script = closed / "server.py"
    closed.mkdir()
    script.write_text("")
    closed.chmod(0o700)
    reason = mcp_paths.out_of_reach(str(tool), [str(script)], base=[], private=[], uid=272000)
    assert reason == (
        f"the server runs as uid 272000 (the sandbox runs as root), which cannot reach a path"
        f" its arguments name, {script}: {closed} is not open to other users (mode 700);"
        " install the server where every user can read it, such as /opt or /usr/local"
    )
    # Without a uid of its own (the sandbox not root) the modes are the service's own.
    assert mcp_paths.out_of_reach(str(tool), [str(script)], base=[], private=[], uid=None) is None


def test_a_file_others_may_not_read_or_run_is_out_of_reach_and_open_ones_are_not(
    open_tmp: Path,
) -> None:
    tmp_path = open_tmp
    tool = executable(tmp_path / "bin" / "server")
    script = tmp_path / "server.py"
    script.write_text("")
    script.chmod(0o644)
    assert mcp_paths.out_of_reach(str(tool), [str(script)], base=[], private=[], uid=7) is None
    script.chmod(0o600)
    assert "(mode 600)" in str(
        mcp_paths.out_of_reach(str(tool), [str(script)], base=[], private=[], uid=7)
    )
    tool.chmod(0o744)  # others may read it, not run it
    assert f"its command, {tool}: {tool} is not open to other users (mode 744)" in str(
        mcp_paths.out_of_reach(str(tool), [], base=[], private=[], uid=7)
    )
