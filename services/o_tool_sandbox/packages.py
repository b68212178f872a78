"""Installing the packages users' tools import (`pip_requirements`), once per set.

A tool's requirements (its own and the sandbox configuration's) name a set of packages;
the set is installed with pip into a folder of its own under the packages root, named by a
hash of the set and the tools' Python, and put on the tool's path (`site.addsitedir`) when it
runs. The next call with the same set finds the folder and installs nothing.

- **Wheels only** (`--only-binary=:all:`): installing a wheel runs none of its code, while
  building a source distribution would run the package's own setup code here, in the
  sandbox service, outside any tool's confinement. A package without a wheel for the tools'
  Python is an error that says so.
- **The tools' Python**: pip runs from this service's environment but installs for the
  interpreter tools run in (`pip --python`), so compiled wheels match it.
- **Read-only to tools**: every worker may read the packages root (Landlock) and write
  none of it; the folders are made by this service and readable by the tools' uids.
- **Atomic**: a set is installed into a temporary folder and renamed into place when
  complete, so a concurrent call, another replica on the host or a crash mid-install never
  sees half a set. Replicas of one host may share the root.
- pip is given only requirement specs validated by o_contracts/pip_requirements.py, and its
  configuration comes from the operator's `PIP_*` variables (an index mirror, a proxy), never
  from a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path

from o_contracts.pip_requirements import PipRequirement, specs

log = logging.getLogger(__name__)

# Environment variables pip may take from the service's own (its configuration, proxies,
# certificates); nothing else of the service's environment (NATS credentials, keys) reaches it.
_PASSED = ("PATH", "HOME", "LANG", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")
_PROXIES = ("http_proxy", "https_proxy", "no_proxy", "all_proxy")
# pip's output kept in an error (its last lines say why).
ERROR_TAIL = 2000
COMPLETE = ".o-complete"
INSTALLS_AT_ONCE = 2
MB = 1 << 20


class PackagesUnavailable(Exception):
    """The packages could not be installed (the reason is for the model and the user)."""


def default_root() -> Path:
    # Under the system's temporary folder, which every uid may traverse (a folder under
    # root's home would be closed to the tools' uids); one per user, so another local
    # user cannot have made it first.
    return Path(tempfile.gettempdir()) / f"o-sandbox-packages-{os.geteuid()}"


def set_key(requirements: list[str], python_tag: str) -> str:
    text = python_tag + "\n" + "\n".join(sorted(set(requirements)))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def pip_environment(environ: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in environ.items() if k in _PASSED or k.startswith("PIP_")}
    env |= {k: v for k, v in environ.items() if k.lower() in _PROXIES}
    env.setdefault("PATH", "/usr/bin:/bin")
    return env


class Packages:
    """The package sets of one host's sandbox, installed on demand."""

    def __init__(
        self,
        root: Path,
        python: str,
        enabled: bool,
        timeout: float,
        max_bytes: int = 4096 * MB,
        idle_seconds: float = 600.0,
    ) -> None:
        """`max_bytes`: what all sets may take together; the sets least recently used are
        removed past it, but none used in the last `idle_seconds` (longer than any call
        runs, so no running tool loses its packages)."""
        self.root = root
        self.max_bytes = max_bytes
        self.idle_seconds = idle_seconds
        self.python = python
        # A set installed for one interpreter is not another's (compiled wheels).
        self.python_tag = os.path.realpath(python)
        self._pip = [sys.executable, "-m", "pip"]
        if self.python_tag != os.path.realpath(sys.executable):
            self._pip += ["--python", python]
        self.enabled = enabled
        self.timeout = timeout
        self.unavailable = "" if enabled else "off (O_SANDBOX_PACKAGES=0)"
        self._locks: dict[str, asyncio.Lock] = {}
        # pip processes at once (each takes a core and ~100 MB): calls naming many different
        # sets at once wait their turn instead of starving the host.
        self._installing = asyncio.Semaphore(INSTALLS_AT_ONCE)
        if enabled:
            self.unavailable = self._prepare_root()

    def _prepare_root(self) -> str:
        """Make the root, or say why packages cannot be offered ('' when they can)."""
        try:
            self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
            info = self.root.stat()
        except OSError as exc:
            return f"unavailable ({self.root}: {exc.strerror})"
        if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            # Someone else's, or writable by others: they could plant packages in it.
            return f"unavailable ({self.root} is not this service's own folder)"
        self.root.chmod(0o755)
        if not _traversable(self.root):
            return f"unavailable ({self.root} is not readable by the tools' uids)"
        # Half-installed sets of a process that died mid-install.
        for stale in self.root.glob(".installing-*"):
            with contextlib.suppress(OSError):
                if _owner_gone(stale):
                    shutil.rmtree(stale, ignore_errors=True)
        return ""

    def refuse_unless_read_only(self, isolation: dict[str, object]) -> None:
        """Offer packages only where no tool can change another's: tools run as other uids
        than this service (root), or Landlock keeps them to reading (otherwise a tool could
        plant code in a set the next tool imports)."""
        separate_uid = isolation.get("uid") is not None
        landlock = str(isolation.get("landlock", "")).startswith("abi")
        if self.enabled and not self.unavailable and not (separate_uid or landlock):
            self.unavailable = (
                "unavailable (tools run as this service's uid and Landlock is not applied"
                " here, so a tool could change the packages another imports)"
            )

    def describe(self) -> str:
        return self.unavailable or f"installed on demand, wheels only, into {self.root}"

    async def path_for(self, requirements: list[PipRequirement]) -> str | None:
        """The folder holding these packages (installed now if they were not); None for none."""
        wanted = specs(requirements)
        if not wanted:
            return None
        if self.unavailable:
            raise PackagesUnavailable(
                f"this sandbox does not install packages: {self.unavailable};"
                f" the tool needs {', '.join(wanted)}"
            )
        key = set_key(wanted, self.python_tag)
        target = self.root / key
        if _complete(target):
            _used(target)
            return str(target)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if not await asyncio.to_thread(_complete, target):
                async with self._installing:
                    await self._install(wanted, target)
                await asyncio.to_thread(self._evict, key)
        return str(target)

    def _evict(self, keep: str) -> None:
        """Remove the sets least recently used while all take more than `max_bytes`."""
        now = time.time()
        sets = []
        for folder in self.root.iterdir():
            marker = folder / COMPLETE
            if folder.name.startswith(".") or not marker.exists():
                continue
            info = marker.stat()
            sets.append((info.st_mtime, _set_bytes(marker), folder))
        total = sum(size for _, size, _ in sets)
        for last_use, size, folder in sorted(sets, key=lambda s: s[0]):
            if total <= self.max_bytes:
                return
            if folder.name == keep or now - last_use < self.idle_seconds:
                continue
            # Out of the way first (a rename is atomic), then removed.
            doomed = self.root / f".evicting-{os.getpid()}-{folder.name}"
            with contextlib.suppress(OSError):
                folder.rename(doomed)
                shutil.rmtree(doomed, ignore_errors=True)
                total -= size
                log.info("removed the packages of %s (unused, over the limit)", folder.name)
        if total > self.max_bytes:
            log.warning(
                "tools' packages take %d MB, over O_SANDBOX_PACKAGES_MAX_MB; every set was used"
                " within %gs, so none was removed",
                total // MB,
                self.idle_seconds,
            )

    async def _install(self, wanted: list[str], target: Path) -> None:
        staging = Path(tempfile.mkdtemp(prefix=f".installing-{os.getpid()}-", dir=self.root))
        try:
            command = [
                *self._pip,
                "install",
                "--target",
                str(staging),
                "--only-binary=:all:",
                "--no-input",
                "--disable-pip-version-check",
                "--no-warn-script-location",
                "--root-user-action=ignore",
                "--quiet",
                "--",
                *wanted,
            ]
            log.info("installing packages for tools: %s", " ".join(wanted))
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=pip_environment(dict(os.environ)),
                start_new_session=True,
            )
            try:
                output, _ = await asyncio.wait_for(proc.communicate(), self.timeout)
            except TimeoutError:
                await _stop(proc)
                raise PackagesUnavailable(
                    f"installing {', '.join(wanted)} took over {self.timeout:g}s"
                ) from None
            except asyncio.CancelledError:  # (the service stops)
                await _stop(proc)
                raise
            if proc.returncode != 0:
                text = output.decode(errors="replace").strip()
                raise PackagesUnavailable(
                    f"pip could not install {', '.join(wanted)} (wheels only):\n"
                    + text[-ERROR_TAIL:]
                )
            await asyncio.to_thread(_put_in_place, staging, target, wanted)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 9)
    await proc.wait()


def _complete(target: Path) -> bool:
    return (target / COMPLETE).exists()


def _used(target: Path) -> None:
    """Note the set's use (its marker's time), at most once a minute."""
    marker = target / COMPLETE
    with contextlib.suppress(OSError):
        if time.time() - marker.stat().st_mtime > 60:
            os.utime(marker)


def _set_bytes(marker: Path) -> int:
    try:
        return int(json.loads(marker.read_text())["bytes"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _put_in_place(staging: Path, target: Path, wanted: list[str]) -> None:
    _readable_by_all(staging)
    size = sum(
        os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(staging) for f in files
    )
    (staging / COMPLETE).write_text(json.dumps({"requirements": wanted, "bytes": size}) + "\n")
    try:
        staging.rename(target)
    except OSError:
        # Another replica of this host put the same set in place first.
        if not _complete(target):
            raise


def _readable_by_all(folder: Path) -> None:
    folder.chmod(0o755)
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                mode = os.stat(path).st_mode
                os.chmod(path, 0o755 if mode & stat.S_IXUSR else 0o644)


def _traversable(path: Path) -> bool:
    try:
        return all(p.stat().st_mode & stat.S_IXOTH for p in [*path.parents, path])
    except OSError:
        return False


def _owner_gone(staging: Path) -> bool:
    pid = staging.name.removeprefix(".installing-").split("-", 1)[0]
    return pid.isdigit() and not Path(f"/proc/{pid}").exists()
