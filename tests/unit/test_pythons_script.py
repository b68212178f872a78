"""scripts/pythons.sh: which Pythons the Makefile and the install check find. Names on PATH
count only if they run (an inactive pyenv shim does not), pyenv's installed versions count
too, newest first; with none, it says what to do."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pythons.sh"
TOOLS = ("bash", "ls", "sort", "cat")


def fake_python(path: Path, version: str) -> None:
    """An interpreter that answers the script's probe as Python `version` at `path` would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{version} {path}'\n")
    path.chmod(0o755)


def shim(path: Path) -> None:
    """pyenv's shim of a version that is installed but not selected."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    path.chmod(0o755)


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    env = {
        "PATH": str(bin_dir),
        "HOME": str(tmp_path / "home"),
        "PYENV_ROOT": str(tmp_path / "pyenv"),
    }
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=30
    )


def test_supported_versions_on_path_are_listed_newest_first(tmp_path: Path) -> None:
    fake_python(tmp_path / "bin" / "python3.11", "3.11")
    fake_python(tmp_path / "bin" / "python3.12", "3.12")

    out = run(tmp_path)

    assert out.returncode == 0
    assert out.stdout.splitlines() == [
        f"3.12 {tmp_path / 'bin' / 'python3.12'}",
        f"3.11 {tmp_path / 'bin' / 'python3.11'}",
    ]


def test_an_inactive_pyenv_shim_gives_way_to_pyenvs_newest_patch_release(tmp_path: Path) -> None:
    fake_python(tmp_path / "bin" / "python3.11", "3.11")
    shim(tmp_path / "bin" / "python3.13")
    fake_python(tmp_path / "pyenv" / "versions" / "3.13.0" / "bin" / "python3.13", "3.13")
    newest = tmp_path / "pyenv" / "versions" / "3.13.10" / "bin" / "python3.13"
    fake_python(newest, "3.13")

    out = run(tmp_path, "--newest")

    assert out.returncode == 0
    assert out.stdout == f"{newest}\n"


def test_python3_counts_for_the_version_it_is(tmp_path: Path) -> None:
    fake_python(tmp_path / "bin" / "python3", "3.12")

    assert run(tmp_path).stdout == f"3.12 {tmp_path / 'bin' / 'python3'}\n"


def test_an_unsupported_python_is_not_listed(tmp_path: Path) -> None:
    fake_python(tmp_path / "bin" / "python3", "3.10")

    listed = run(tmp_path)
    newest = run(tmp_path, "--newest")

    assert (listed.returncode, listed.stdout) == (0, "")
    assert newest.returncode == 1


def test_with_no_supported_python_it_says_how_to_get_one(tmp_path: Path) -> None:
    out = run(tmp_path, "--newest")

    assert out.returncode == 1
    assert out.stdout == ""
    assert "O needs Python 3.11, 3.12 or 3.13" in out.stderr
    assert "PYTHON=/path/to/python3.x" in out.stderr


def test_a_named_python_is_used_if_it_runs_and_is_supported(tmp_path: Path) -> None:
    fake_python(tmp_path / "bin" / "python3.13", "3.13")
    fake_python(tmp_path / "bin" / "python3.12", "3.12")

    out = run(tmp_path, "--use", "python3.12")

    assert (out.returncode, out.stdout) == (0, f"{tmp_path / 'bin' / 'python3.12'}\n")


def test_a_named_python_that_does_not_run_or_is_too_old_is_refused_with_the_reason(
    tmp_path: Path,
) -> None:
    shim(tmp_path / "bin" / "python3.13")
    fake_python(tmp_path / "bin" / "python3.10", "3.10")

    inactive = run(tmp_path, "--use", "python3.13")
    old = run(tmp_path, "--use", "python3.10")

    assert (inactive.returncode, inactive.stdout) == (1, "")
    assert "PYTHON=python3.13 does not run here" in inactive.stderr
    assert (old.returncode, old.stdout) == (1, "")
    assert "PYTHON=python3.10 is Python 3.10; O supports 3.11, 3.12 and 3.13" in old.stderr


def test_an_empty_name_means_the_newest(tmp_path: Path) -> None:
    fake_python(tmp_path / "bin" / "python3.11", "3.11")
    fake_python(tmp_path / "bin" / "python3.12", "3.12")

    assert run(tmp_path, "--use", "").stdout == f"{tmp_path / 'bin' / 'python3.12'}\n"
