"""A quick check that O works in this Python: `python -m o_devtools.smoke`.

What `make install-check` runs in each throwaway virtualenv (scripts/install-check.sh): every
module of O imports, then `make run`'s system (the supervisor, embedded NATS and Postgres, the
five services) starts in a temporary data folder on a free port, answers a few requests that
cross the log, and stops cleanly. It proves the install, not the behaviour (the suite does
that): a wheel missing for this Python, a module that no longer imports, an interpreter the
sandbox cannot use, or a service that dies at start all fail it, in about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import pkgutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from o_devtools.health import wait_healthy
from o_devtools.ports import free_port

PACKAGES = (
    "o_contracts",
    "o_runtime",
    "o_gateway",
    "o_executor",
    "o_memory",
    "o_tool_sandbox",
    "o_evolution",
    "o_schedules",
    "o_devtools",
)
# Settings a developer's shell may carry that would point the system elsewhere.
SCRUBBED = ("NATS_URL", "DATABASE_URL", "O_SERVICES", "O_API_KEY", "NOTIFY_SOCKET")
TOOL = '''
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b
'''


def import_everything() -> int:
    """Import every module of O's packages (but `__main__`s, which start a service); how many."""
    count = 0
    for name in PACKAGES:
        package = importlib.import_module(name)
        count += 1
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if info.name.rsplit(".", 1)[-1] != "__main__":
                importlib.import_module(info.name)
                count += 1
    return count


async def _requests(http: httpx.AsyncClient) -> None:
    """A block written through the log and read from its projection; a tool run in the sandbox."""
    made = await http.post("/v1/blocks/", json={"label": "smoke", "value": "it works"})
    made.raise_for_status()
    block_id = made.json()["id"]
    read = await http.get(f"/v1/blocks/{block_id}")
    read.raise_for_status()
    if read.json()["value"] != "it works":
        raise AssertionError(f"the block read back is {read.json()!r}")
    ran = await http.post("/v1/tools/run", json={"source_code": TOOL, "args": {"a": 2, "b": 3}})
    ran.raise_for_status()
    body: dict[str, Any] = ran.json()
    if (body["status"], body["tool_return"]) != ("success", "5"):
        raise AssertionError(f"the sandbox answered {body!r}")


async def run_system(base: Path, timeout: float) -> None:
    """`make run`'s system in `base`: started, asked, stopped (SIGTERM, exit code 0)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED} | {
        "O_DATA_DIR": str(base),
        "O_HTTP_HOST": "127.0.0.1",
        "O_HTTP_PORT": str(port),
        "O_LOG_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
    }
    log_path = base / "system.log"
    with log_path.open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "o_devtools.supervisor",
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", timeout=timeout
            ) as http:
                await wait_healthy(http, timeout)
                async with asyncio.timeout(timeout):
                    await _requests(http)
        except BaseException:
            print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
            raise
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 60)
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    await proc.wait()
    if proc.returncode != 0:
        print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
        raise RuntimeError(f"the supervisor stopped with exit code {proc.returncode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for each phase")
    parser.add_argument("--imports-only", action="store_true", help="skip starting the system")
    args = parser.parse_args()
    version = sys.version.split()[0]
    started = time.monotonic()
    print(f"smoke: Python {version}: {import_everything()} modules import", flush=True)
    if not args.imports_only:
        with tempfile.TemporaryDirectory(prefix="o-smoke-") as base:
            asyncio.run(run_system(Path(base), args.timeout))
        print(
            f"smoke: Python {version}: `make run`'s system started, wrote and read a block,"
            f" ran a tool, stopped ({time.monotonic() - started:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
