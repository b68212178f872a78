"""What a confined stdio MCP server may read, decided from its command line.

A user tool needs only the standard library; an MCP server is a program with an
installation of its own (a virtualenv, a node_modules tree, a script beside its
modules), so Landlock must let it read that too and nothing of O's. Read access goes to:

- the system folders (/usr, /bin, /sbin, /lib*, /etc) and the sandbox interpreter's;
- the command's installation: the folder above its `bin/` (a virtualenv, a node
  prefix), for the path as given and as its symlinks resolve;
- for each absolute path in the arguments or the server's environment (a script,
  PYTHONPATH, a config file): the folder it is in, or the folder itself;
- what the operator adds (`O_MCP_STDIO_READ_PATHS`).

Never a folder that holds, or is inside, one of O's own (its data folder with the
log, the database and the secrets key; the sandbox's scratch folders; the service's
home): a path there is given alone if it is a file, else not at all. Under root the
server also runs as a uid of its own, so only world-readable files are readable anyway.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/usr/lib64", "/etc")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class CommandNotFound(Exception):
    """The server's command is not on its PATH (the message says what was looked for)."""


def resolve_command(command: str, env: Mapping[str, str]) -> str:
    """The absolute path the server is started from (exec needs no PATH search)."""
    path = env.get("PATH") or DEFAULT_PATH
    found = shutil.which(command, path=path)
    if found is None:
        raise CommandNotFound(f"command not found: {command} (PATH={path})")
    return os.path.abspath(found)


def _within(path: Path, other: Path) -> bool:
    return path == other or other in path.parents


def _installation(executable: str) -> list[Path]:
    """The folder above `bin/` for the path as given and each step of its symlinks."""
    found: list[Path] = []
    current = Path(executable)
    for _ in range(8):  # a symlink chain, bounded
        folder = current.parent
        found.append(folder.parent if folder.name == "bin" else folder)
        if not current.is_symlink():
            break
        current = (current.parent / os.readlink(current)).resolve(strict=False)
    found.append(Path(os.path.realpath(executable)).parent)
    return found


def _named_paths(values: Iterable[str]) -> list[Path]:
    """Absolute paths that exist among these values (path lists split on ':')."""
    named = []
    for value in values:
        for part in value.split(os.pathsep):
            if part.startswith("/") and os.path.exists(part):
                named.append(Path(os.path.normpath(part)))
    return named


def read_paths(
    executable: str,
    args: Iterable[str],
    env: Mapping[str, str],
    *,
    base: Iterable[str],
    extra: Iterable[str],
    private: Iterable[str],
) -> list[str]:
    """Landlock's read list for one server (see the module docstring).

    `base`: the sandbox interpreter's paths; `extra`: the operator's;
    `private`: O's own folders, never opened to a server.
    """
    closed = [Path(os.path.realpath(p)) for p in private if p]

    def allowed(path: Path) -> bool:
        real = Path(os.path.realpath(path))
        if real == Path("/"):
            return False
        return not any(_within(c, real) or _within(real, c) for c in closed)

    chosen: list[Path] = [Path(p) for p in (*SYSTEM, *base) if os.path.exists(p)]
    chosen += [p for p in _installation(executable) if allowed(p)]
    for path in _named_paths([*args, *env.values()]):
        folder = path if path.is_dir() else path.parent
        if allowed(folder):
            chosen.append(folder)
        elif path.is_file() and allowed(path):
            chosen.append(path)
    chosen += [Path(p) for p in extra if p and os.path.exists(p)]
    unique: list[str] = []
    for path in chosen:
        text = str(path)
        if text not in unique:
            unique.append(text)
    return unique
