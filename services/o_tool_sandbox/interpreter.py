"""Which Python runs the tools, and which paths it may read.

Workers drop to an unprivileged uid before reading any tool code, so the
interpreter's standard library must be readable by anyone: a Python under
root's home (pyenv, say) is not, and then the system's Python of the same
version is used. `O_SANDBOX_PYTHON` overrides the choice.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path


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


def _stdlib_paths(python: str) -> list[str]:
    out = subprocess.run(
        [python, "-I", "-S", "-c", "import sys; print('\\n'.join(sys.path))"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [p for p in out.stdout.splitlines() if p and os.path.exists(p)]


def choose(unprivileged: bool, python: str | None = None) -> tuple[str, list[str]]:
    """The interpreter and the paths workers may read (its stdlib and the system libraries).

    `python`: the one asked for (O_SANDBOX_PYTHON), tried first.
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [
        python,
        sys.executable,
        f"/usr/local/bin/{version}",
        f"/usr/bin/{version}",
    ]
    chosen = None
    for python in [c for c in candidates if c and shutil.which(c)]:
        paths = _stdlib_paths(python)
        if not unprivileged or all(_world_readable(Path(p)) for p in paths):
            chosen = (python, paths)
            break
    if chosen is None:
        raise RuntimeError(
            "no Python whose standard library an unprivileged user can read; set O_SANDBOX_PYTHON"
        )
    python, paths = chosen
    system = [p for p in ("/usr/lib", "/lib", "/lib64", "/usr/lib64") if os.path.isdir(p)]
    return python, paths + system
