"""How long `make run` is unavailable after a kill -9 of nats-server, the postmaster, one
Postgres backend or the gateway: `.venv/bin/python -m tests.integration.supervision_outage
[--rounds N] [--kinds nats,postmaster,backend,gateway]` (`O_SPARES=executor` in the
environment: the gateway without its spare).

Runs the real supervisor (`python -m o_devtools.supervisor`: embedded NATS and Postgres, the
five services) against the local fake OpenAI server, keeps `--clients` clients sending agent
messages (gateway -> executor -> LLM -> events -> projections -> reply) one after another,
kills, and reports per kill:

- recovered: from the kill to the first successful answer to a message sent after it;
- longest wait: the slowest successful answer among messages in flight at the kill or sent
  after it until recovery;
- failed: answers other than 200 (or no answer within --timeout) meanwhile;
- server back: the supervisor's own "is back" time (kill to a ready server; NATS and
  Postgres only).

Not a test (timings, not assertions); the tests of the same behaviour are in
test_supervised_servers.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from o_devtools.embedded import pid_alive
from o_devtools.ports import free_port
from tests.fakes.openai_server import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Answer:
    sent: float
    done: float
    ok: bool


@dataclass
class Probe:
    http: httpx.AsyncClient
    agent_ids: list[str]
    timeout: float
    answers: list[Answer] = field(default_factory=list)
    running: bool = True

    async def client(self, index: int) -> None:
        agent = self.agent_ids[index % len(self.agent_ids)]
        n = 0
        while self.running:
            n += 1
            sent = time.monotonic()
            try:
                r = await self.http.post(
                    f"/v1/agents/{agent}/messages",
                    json={"messages": [{"role": "user", "content": f"probe {index}.{n}"}]},
                    timeout=self.timeout,
                )
                ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            self.answers.append(Answer(sent, time.monotonic(), ok))
            if not ok:
                await asyncio.sleep(0.05)  # a failing request returns at once: do not spin

    async def steady(self, seconds: float) -> None:
        """Wait until every answer of the last `seconds` was a success (at least one)."""
        while True:
            now = time.monotonic()
            recent = [a for a in self.answers if a.done > now - seconds]
            if recent and all(a.ok for a in recent) and self.answers[0].done < now - seconds:
                return
            await asyncio.sleep(0.1)

    async def recovery_after(self, killed: float, settle: float) -> tuple[float, float, int]:
        while True:
            after = [a for a in self.answers if a.sent > killed and a.ok]
            if after:
                recovered = min(a.done for a in after)
                break
            await asyncio.sleep(0.02)
        # Let requests in flight at recovery finish before judging the longest wait.
        await asyncio.sleep(settle)
        window = [a for a in self.answers if a.done > killed and a.sent <= recovered]
        longest = max((a.done - a.sent for a in window if a.ok), default=0.0)
        failed = sum(1 for a in self.answers if a.done > killed and not a.ok)
        return recovered - killed, longest, failed


def _pid_file(path: Path) -> int:
    return int(path.read_text().split()[0])


def _client_backend(postmaster: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError):
            continue
        if ppid == postmaster and "[local]" in cmd:
            return int(entry.name)
    return None


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="kills of each kind")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=60.0, help="per request")
    parser.add_argument("--kinds", default="nats,postmaster,backend,gateway")
    parser.add_argument(
        "--between",
        type=float,
        default=3.0,
        help="seconds of steady load before each kill (a service that lived 30 s is restarted"
        " at once; one killed sooner after its start waits out the supervisor's backoff)",
    )
    args = parser.parse_args()

    fake = FakeOpenAI()
    fake.start()
    data = Path(tempfile.mkdtemp(prefix="o-outage-"))
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("contracts", "services", ".")),
        "O_DATA_DIR": str(data),
        "O_HTTP_PORT": str(port),
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": "sk-test",
        "O_LOG_LEVEL": os.environ.get("O_LOG_LEVEL", "WARNING"),
    }
    for name in ("NATS_URL", "DATABASE_URL", "NOTIFY_SOCKET"):
        env.pop(name, None)
    log_path = data / "supervisor.log"
    with log_path.open("ab") as out:
        sup = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "o_devtools.supervisor", env=env, stdout=out, stderr=out
        )
    print(f"supervisor pid {sup.pid}, data {data}, log {log_path}", flush=True)
    http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}")
    probe: Probe | None = None
    clients: list[asyncio.Task[None]] = []
    try:
        await _until_healthy(http)
        agent_ids = []
        for i in range(args.clients):
            r = await http.post(
                "/v1/agents/",
                json={
                    "name": f"probe-{i}",
                    "model": "openai/gpt-4o-mini",
                    "memory_blocks": [{"label": "human", "value": "Name: Sam"}],
                },
                timeout=60,
            )
            r.raise_for_status()
            agent_ids.append(r.json()["id"])
        probe = Probe(http, agent_ids, args.timeout)
        clients = [asyncio.create_task(probe.client(i)) for i in range(args.clients)]

        kills: dict[str, Callable[[], int | None]] = {
            "nats": lambda: _pid_file(data / "nats" / "nats-server.pid"),
            "postmaster": lambda: _pid_file(data / "postgres" / "postmaster.pid"),
            "backend": lambda: _client_backend(_pid_file(data / "postgres" / "postmaster.pid")),
            "gateway": lambda: _listening(port),
        }
        results: dict[str, list[tuple[float, float, int, float | None]]] = {}
        for kind in args.kinds.split(","):
            for _ in range(args.rounds):
                await probe.steady(args.between)
                victim = kills[kind]()
                if victim is None:
                    print(f"{kind}: nothing to kill", flush=True)
                    continue
                log_size = log_path.stat().st_size
                killed = time.monotonic()
                os.kill(victim, signal.SIGKILL)
                recovered, longest, failed = await probe.recovery_after(killed, settle=2.0)
                back = _server_back(log_path, log_size)
                results.setdefault(kind, []).append((recovered, longest, failed, back))
                print(
                    f"{kind:10} pid {victim:>7}: recovered {recovered:6.2f}s  longest wait "
                    f"{longest:6.2f}s  failed {failed:3}  server back "
                    + (f"{back:.2f}s" if back is not None else "-"),
                    flush=True,
                )
        print("\nkind        rounds  recovered (median / max)  longest wait (max)  failed")
        for kind, rows in results.items():
            rec = [r[0] for r in rows]
            print(
                f"{kind:10} {len(rows):7}  {statistics.median(rec):8.2f} / {max(rec):5.2f} s"
                f"  {max(r[1] for r in rows):14.2f} s  {sum(r[2] for r in rows):7}"
            )
    finally:
        if probe is not None:
            probe.running = False
        for task in clients:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
        await http.aclose()
        started = _started_pids(data)
        sup.send_signal(signal.SIGTERM)
        code = await sup.wait()
        fake.stop()
        left = [p for p in {*started, *_pids_under(data)} if pid_alive(p)]
        print(f"supervisor exited with {code}; processes left: {left or 'none'}")
    return 0


def _server_back(log_path: Path, since: int) -> float | None:
    with log_path.open("rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    found = re.search(r"is back \(pid \d+\), ([\d.]+)s after it died", text)
    return float(found.group(1)) if found else None


def _listening(port: int) -> int | None:
    """The process serving HTTP on `port` (the gateway replica, not its waiting spare): the
    listening socket's inode in /proc/net/tcp, then the process holding it."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
            inodes.add(f"socket:[{inode}]")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                    return int(entry.name)
    return None


def _started_pids(data: Path) -> list[int]:
    """The supervisor's services (its state file) and the servers (their pid files)."""
    import json

    pids = []
    with contextlib.suppress(OSError, ValueError):
        pids += [pid for pid, _ in json.loads((data / "supervisor.json").read_text())["children"]]
    for pid_file in (data / "nats" / "nats-server.pid", data / "postgres" / "postmaster.pid"):
        with contextlib.suppress(OSError, ValueError):
            pids.append(_pid_file(pid_file))
    return pids


def _pids_under(data: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
                cwd = os.readlink(entry / "cwd")
                if str(data) in cmd or cwd.startswith(str(data)):
                    found.append(int(entry.name))
    return found


async def _until_healthy(http: httpx.AsyncClient) -> None:
    async def healthy() -> bool:
        try:
            return (await http.get("/v1/health/")).status_code == 200
        except httpx.TransportError:
            return False

    async with asyncio.timeout(90.0):
        while True:
            if await healthy():
                return
            await asyncio.sleep(0.1)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
