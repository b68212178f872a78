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

Both rules stop a server installed in such a place (a virtualenv in root's home, say)
with nothing better from the kernel than "Permission denied"; `out_of_reach` says which
rule and which folder, and the sandbox adds it to the reason a server that never
started gives (it does not refuse on it: an ACL may open what the mode bits close).
"""

from __future__ import annotations

import os
import shutil
import stat
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


def out_of_reach(
    executable: str,
    args: Iterable[str],
    *,
    base: Iterable[str],
    private: Iterable[str],
    uid: int | None,
) -> str | None:
    """Why the confined server may not reach its command or a path its arguments name:
    inside one of O's own folders (`private`, never opened but for the sandbox
    interpreter's `base`), or, run as `uid` (no groups: the mode bits for others
    decide), behind a folder or file other users may not enter or read. None if
    neither applies."""
    closed = [Path(os.path.realpath(p)) for p in private if p]
    opened = [Path(os.path.realpath(p)) for p in base if p]
    for path in [Path(executable), *_named_paths(args)]:
        what = "its command" if str(path) == executable else "a path its arguments name"
        real = Path(os.path.realpath(path))
        inside = [c for c in closed if _within(real, c)]
        if inside and not any(_within(real, o) for o in opened):
            return (
                f"{what}, {path}, is inside {inside[0]}, one of O's own folders (the"
                " sandbox service's home or data), which stdio MCP servers may never read;"
                " install the server elsewhere, such as /opt or /usr/local"
            )
        if uid is None:
            continue
        blocked = _closed_to_others(path, command=str(path) == executable)
        if blocked is not None:
            where, mode = blocked
            return (
                f"the server runs as uid {uid} (the sandbox runs as root), which cannot reach"
                f" {what}, {path}: {where} is not open to other users (mode {mode:o});"
                " install the server where every user can read it, such as /opt or /usr/local"
            )
    return None


def _closed_to_others(path: Path, *, command: bool) -> tuple[Path, int] | None:
    """The first folder on the way to `path` that others may not enter, or `path` itself
    if they may not run (a command) or read it; with its mode bits."""
    real = Path(os.path.realpath(path))
    folders = [*reversed(path.parents), *reversed(real.parents)]
    for folder in dict.fromkeys(folders):
        mode = _mode(folder)
        if mode is not None and not mode & stat.S_IXOTH:
            return folder, stat.S_IMODE(mode)
    mode = _mode(real)
    if mode is None:
        return None
    if stat.S_ISDIR(mode):
        needed = stat.S_IXOTH | stat.S_IROTH
    else:
        needed = stat.S_IXOTH if command else stat.S_IROTH
    return None if mode & needed == needed else (real, stat.S_IMODE(mode))


def _mode(path: Path) -> int | None:
    try:
        return os.stat(path).st_mode
    except OSError:
        return None
