"""Which Python the sandbox's workers run: one whose standard library an unprivileged uid can
read, 3.11 or newer; a pyenv Python under root's home (3.12, 3.13) falls back to the system's,
of its own version if there is one, else of another supported version."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from o_tool_sandbox import interpreter


def fake_python(path: Path, version: str, stdlib: Path) -> str:
    """A stand-in interpreter that answers the probe with `version` and `stdlib`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{version}'\necho '{stdlib}'\n")
    path.chmod(0o755)
    return str(path)


def python_with_private_stdlib(tmp_path: Path) -> str:
    """A Python 3.13 whose standard library is in a folder only root may enter (pyenv's under
    /root)."""
    private = tmp_path / "root" / "lib"
    private.mkdir(parents=True)
    (tmp_path / "root").chmod(0o700)
    return fake_python(tmp_path / "root" / "python", "3 13", private)


def test_candidates_are_asked_then_this_one_then_the_systems_same_version_then_others() -> None:
    found = interpreter.candidates("/opt/py", "/venv/bin/python", (3, 12))
    assert found == [
        "/opt/py",
        "/venv/bin/python",
        "/usr/local/bin/python3.12",
        "/usr/bin/python3.12",
        "/usr/local/bin/python3.13",
        "/usr/bin/python3.13",
        "/usr/local/bin/python3.11",
        "/usr/bin/python3.11",
        "/usr/local/bin/python3",
        "/usr/bin/python3",
    ]


def test_candidates_name_each_interpreter_once() -> None:
    found = interpreter.candidates("/usr/bin/python3.11", "/usr/bin/python3.11", (3, 11))
    assert found.count("/usr/bin/python3.11") == 1
    assert found[0] == "/usr/bin/python3.11"


def test_a_private_stdlib_an_old_python_and_a_broken_shim_give_way_to_a_readable_system_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = python_with_private_stdlib(tmp_path)
    # pytest's tmp_path is private to root: the readable library is a system folder.
    public = Path("/usr")
    bins = tmp_path / "bin"
    old = fake_python(tmp_path / "old" / "python3.10", "3 10", public)
    # An inactive pyenv shim: on PATH, but it fails.
    shim = bins / "python3.13"
    bins.mkdir()
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    system = fake_python(bins / "python3.12", "3 12", public)
    monkeypatch.setattr(interpreter, "SYSTEM_BINS", (str(bins),))
    monkeypatch.setattr(sys, "executable", mine)

    python, paths = interpreter.choose(unprivileged=True, python=old)

    assert python == system
    assert paths[0] == str(public)


def test_a_privileged_pool_keeps_this_python_whatever_its_stdlibs_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = python_with_private_stdlib(tmp_path)
    monkeypatch.setattr(interpreter, "SYSTEM_BINS", (str(tmp_path / "none"),))
    monkeypatch.setattr(sys, "executable", mine)

    assert interpreter.choose(unprivileged=False)[0] == mine


def test_no_usable_python_says_how_to_choose_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = python_with_private_stdlib(tmp_path)
    monkeypatch.setattr(interpreter, "SYSTEM_BINS", (str(tmp_path / "none"),))
    monkeypatch.setattr(sys, "executable", mine)

    with pytest.raises(RuntimeError, match="set O_SANDBOX_PYTHON"):
        interpreter.choose(unprivileged=True)
