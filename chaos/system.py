"""The system under test: `python -m o_devtools.supervisor` (what `make run` starts) in a data
folder of its own, on free ports, pointed at the chaos LLM; and where its processes are.

The supervisor writes its children's pids to `<data>/supervisor.json` (each child's service is
in its environment, `O_SERVICE`), nats-server its pid to `<data>/nats/nats-server.pid` and
Postgres its postmaster's to `<data>/postgres/postmaster.pid`; the endpoints are in
`<data>/endpoints.json`. If nobody restarts a killed nats-server or Postgres, the harness can
do it through the same embedded helpers the supervisor uses (`o_devtools.embedded`), on the same
port and socket, so the services find them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx

from o_devtools.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("gateway", "executor", "memory", "tool_sandbox", "evolution")
API_KEY = "chaos-key"
# Settings a developer's shell may carry that would point the system elsewhere.
_SCRUBBED = ("NATS_URL", "DATABASE_URL", "O_SERVICES", "O_API_KEY", "NOTIFY_SOCKET")


def python_path(code: Path = ROOT) -> str:
    """The code under test first (this checkout, or another), as the e2e tests do."""
    return os.pathsep.join(str(code / p) for p in ("contracts", "services", "."))


def code_version(code: Path) -> str:
    """The commit of the code under test, and whether its services or contracts have
    uncommitted changes (read only)."""
    import subprocess

    def git(*args: str) -> str:
        try:
            out = subprocess.run(
                ["git", "-C", str(code), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return out.stdout.strip() if out.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "no git checkout (a `git archive`?)"
    changed = git("status", "--porcelain", "--", "services", "contracts").splitlines()
    return f"{code} at {commit}" + (
        f" + uncommitted changes in {len(changed)} files of services/, contracts/"
        if changed
        else ""
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _proc_stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    fields = _proc_stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _service_of(pid: int) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for entry in environ:
        if entry.startswith(b"O_SERVICE="):
            return entry.split(b"=", 1)[1].decode()
    return None


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


async def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


class System:
    """One O system in `base`; `start()`, then the pids and restarts the killer needs."""

    def __init__(
        self,
        base: Path,
        llm_base_url: str,
        env: dict[str, str] | None = None,
        code: Path = ROOT,
    ) -> None:
        self.base = base
        self.code = code
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = base / "system.log"
        self.env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED} | {
            "PYTHONPATH": python_path(code),
            "O_DATA_DIR": str(base),
            "O_HTTP_HOST": "127.0.0.1",
            "O_HTTP_PORT": str(self.port),
            "O_API_KEY": API_KEY,
            "O_LOG_LEVEL": "WARNING",
            "OPENAI_BASE_URL": llm_base_url,
            "OPENAI_API_KEY": "sk-chaos",
            "HF_HUB_OFFLINE": "1",
            **(env or {}),
        }
        self._proc: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None
        # Servers the harness restarted itself (when the supervisor did not).
        self._own_nats: Any = None
        self._own_postgres: Any = None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, timeout: float = 180.0) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "o_devtools.supervisor",
            env=self.env,
            cwd=str(self.code),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=self._log,
            stderr=asyncio.subprocess.STDOUT,
            # Ctrl-C reaches the harness only; it stops the system in order.
            start_new_session=True,
        )
        async with httpx.AsyncClient(base_url=self.base_url, headers=self.headers) as http:
            deadline = time.monotonic() + timeout
            while not await self.healthy(http):
                if self._proc.returncode is not None:
                    raise RuntimeError(
                        f"the supervisor exited with {self._proc.returncode}; see {self.log_path}"
                    )
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"O did not become healthy in {timeout}s; see {self.log_path}"
                    )
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        """SIGTERM the supervisor (it stops the services, then its servers); then whatever the
        harness started, and whatever a dead supervisor left behind in this data folder."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.terminate()
            try:
                await asyncio.wait_for(self._proc.wait(), 60)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
                await self._proc.wait()
        children = _read_json(self.base / "supervisor.json").get("children", [])
        for pid, start in children:
            # Only if still the same process (pid and kernel start time), left by a dead supervisor.
            fields = _proc_stat(pid)
            if alive(pid) and fields is not None and fields[19] == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self._own_postgres is not None:
            await asyncio.to_thread(self._own_postgres.stop)
        postmaster = self.postmaster_pid()
        if postmaster is not None:
            # Immediate shutdown; crash-safe.
            with contextlib.suppress(ProcessLookupError):
                os.kill(postmaster, signal.SIGQUIT)
            if not await _wait_gone(postmaster, 20):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(postmaster, signal.SIGKILL)
        if self._own_nats is not None:
            await asyncio.to_thread(self._own_nats.stop)
        nats = self.nats_pid()
        if nats is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(nats, signal.SIGTERM)
            if not await _wait_gone(nats, 10):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(nats, signal.SIGKILL)
        if self._log is not None:
            self._log.close()

    @property
    def supervisor_alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    # -- access ------------------------------------------------------------------------------

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {API_KEY}"}

    async def healthy(self, http: httpx.AsyncClient) -> bool:
        try:
            return (await http.get("/v1/health/", timeout=5)).status_code == 200
        except httpx.HTTPError:
            return False

    @property
    def endpoints(self) -> dict[str, str]:
        return {k: str(v) for k, v in _read_json(self.base / "endpoints.json").items()}

    @property
    def nats_url(self) -> str:
        return self.endpoints["NATS_URL"]

    @property
    def database_url(self) -> str:
        return self.endpoints["DATABASE_URL"]

    # -- processes ---------------------------------------------------------------------------

    def service_pids(self) -> dict[str, list[int]]:
        """Live children of the supervisor serving as replicas, by service, in the order
        listed (not the spares waiting to replace one: killing those costs nobody anything)."""
        out: dict[str, list[int]] = {name: [] for name in SERVICES}
        state = _read_json(self.base / "supervisor.json")
        spares = set(state.get("spares", []))
        for pid, _start in state.get("children", []):
            name = _service_of(pid) if alive(pid) and pid not in spares else None
            if name is not None:
                out.setdefault(name, []).append(pid)
        return out

    def nats_pid(self) -> int | None:
        pid = _read_pid(self.base / "nats" / "nats-server.pid")
        return pid if alive(pid) and "nats-server" in cmdline(pid or 0) else None

    def postmaster_pid(self) -> int | None:
        pid = _read_pid(self.base / "postgres" / "postmaster.pid")
        return pid if alive(pid) and "postgres" in cmdline(pid or 0) else None

    def postgres_children(self) -> list[int]:
        postmaster = self.postmaster_pid()
        if postmaster is None:
            return []
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                fields = _proc_stat(int(entry.name))
                if fields is not None and fields[1] == str(postmaster):
                    pids.append(int(entry.name))
        return pids

    # -- restarts the supervisor may not do (yet) --------------------------------------------

    def restart_nats(self) -> None:
        """nats-server again on the same port and store (blocking; call in a thread)."""
        from o_devtools.embedded import EmbeddedNats

        port = int(self.nats_url.rsplit(":", 1)[1])
        if self.nats_pid() is not None:
            return
        if self._own_nats is not None:
            self._own_nats.stop()
        nats = EmbeddedNats(self.base, port=port)
        nats.start()
        self._own_nats = nats

    def restart_postgres(self) -> None:
        """Postgres again on the same data folder and socket (blocking; call in a thread)."""
        from o_devtools.embedded import EmbeddedPostgres

        if self.postmaster_pid() is not None:
            return
        postgres = EmbeddedPostgres(self.base)
        postgres.start()
        if postgres.url != self.database_url:
            raise RuntimeError(f"Postgres came back at {postgres.url}, not {self.database_url}")
        self._own_postgres = postgres


async def start_llm(base: Path) -> tuple[asyncio.subprocess.Process, str]:
    """The scripted LLM (`python -m chaos.llm`) in a process of its own; (process, base URL)."""
    port = free_port()
    log = (base / "llm.log").open("ab")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "chaos.llm",
        "--port",
        str(port),
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": python_path()},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    deadline = time.monotonic() + 30
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            if proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the chaos LLM did not start; see {base / 'llm.log'}") from None
            await asyncio.sleep(0.05)


async def stop_llm(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
