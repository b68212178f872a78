"""Which Python runs the tools, and which paths it may read.

Workers drop to an unprivileged uid before reading any tool code, so the
interpreter's standard library must be readable by anyone: a Python under
root's home (pyenv, say) is not, and then a system Python is used: the same
version if there is one, else another that O supports (3.11 and newer: the
zygote and worker modules it runs are O's code). A pyenv 3.13 beside Debian's
3.11 is the common case. `O_SANDBOX_PYTHON` overrides the choice.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

# The oldest Python that runs O's own sandbox modules (zygote.py, worker.py, confine.py).
OLDEST = (3, 11)
# Newest first: the versions O supports (pyproject.toml's requires-python).
SUPPORTED = ("3.13", "3.12", "3.11")
SYSTEM_BINS = ("/usr/local/bin", "/usr/bin")


def candidates(asked: str | None, executable: str, version: tuple[int, int]) -> list[str]:
    """The interpreters to try, in order: the one asked for, this one, the system's of this
    version, then the system's of the other supported versions (newest first) and its
    `python3`."""
    this = f"{version[0]}.{version[1]}"
    others = [v for v in SUPPORTED if v != this]
    names = [f"python{this}", *(f"python{v}" for v in others), "python3"]
    system = [f"{d}/{n}" for n in names for d in SYSTEM_BINS]
    out: list[str] = []
    for c in [asked, executable, *system]:
        if c and c not in out:
            out.append(c)
    return out


def _world_readable(path: Path) -> bool:
    # Every directory on the way needs o+x, the leaf o+r.
    try:
        for part in [*reversed(path.parents), path]:
            mode = part.stat().st_mode
            if not mode & stat.S_IXOTH:
                return False
        return bool(path.stat().st_mode & stat.S_IROTH)
    except OSError:
        return False


def _probe(python: str) -> tuple[tuple[int, int], list[str]]:
    """The interpreter's version and its module search path (isolated, no site)."""
    out = subprocess.run(
        [
            python,
            "-I",
            "-S",
            "-c",
            "import sys; print(*sys.version_info[:2]); print('\\n'.join(sys.path))",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    first, *rest = out.stdout.splitlines()
    major, minor = (int(x) for x in first.split())
    return (major, minor), [p for p in rest if p and os.path.exists(p)]


def choose(unprivileged: bool, python: str | None = None) -> tuple[str, list[str]]:
    """The interpreter and the paths workers may read (its stdlib and the system libraries).

    `python`: the one asked for (O_SANDBOX_PYTHON), tried first.
    """
    chosen = None
    found = sys.version_info[:2]
    for c in candidates(python, sys.executable, (found[0], found[1])):
        if not shutil.which(c):
            continue
        try:
            version, paths = _probe(c)
        except (OSError, subprocess.SubprocessError, ValueError):
            continue  # not a Python that runs here (a pyenv shim of an inactive version, say)
        if version < OLDEST:
            continue
        if not unprivileged or all(_world_readable(Path(p)) for p in paths):
            chosen = (c, paths)
            break
    if chosen is None:
        raise RuntimeError(
            "no Python (3.11 or newer) whose standard library an unprivileged user can read;"
            " set O_SANDBOX_PYTHON"
        )
    chosen_python, paths = chosen
    system = [p for p in ("/usr/lib", "/lib", "/lib64", "/usr/lib64") if os.path.isdir(p)]
    return chosen_python, paths + system
