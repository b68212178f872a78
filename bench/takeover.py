"""How long a run whose executor is SIGKILLed waits before it goes on (issue 16, point 1).

One system (embedded NATS and Postgres; gateway, executor, memory under the Supervisor, as
`make run` starts them) and a scripted model (tests/fakes/openai_server.py) that answers
every request after STEP seconds: three `conversation_search` calls, then the answer, so a
run is four model steps and three tool steps (about 1.2 s undisturbed). Each run is a fresh
agent's; `--kills` runs are each interrupted once: at a random moment between the run's
first model request and its expected end, the executor holding the run is SIGKILLed.

With `--replicas 1` the Supervisor restarts the killed process (at once, as `make run`'s
restarts a process that crashed after a stable run; then the process starts: imports,
connections) and the run goes on there; with `--spare` the executor's spare, loaded
beforehand, takes its place instead (o_runtime/standby.py), and each next kill waits until a
new spare has loaded. With `--replicas 2` the other replica may take it at once. Each
executor replica asks a model server of its own, so the one that made the run's latest model
request is the one that holds it.

Per kill:
- resume: from the kill to the run's next model request (the step after the kill starts),
  or to the run's end if no model step was left;
- extra: the run's whole duration minus the median undisturbed one (`--baseline` runs first):
  what the kill cost the caller, including the model step asked again.
Then exactly once, from the stored messages, the log and the model's requests: each run's
conversation is its user message, three tool calls with their returns, and one answer, each
once; one RunStarted and one RunCompleted; at most one model request more than undisturbed
(the one in flight at the kill).

    PYTHONPATH=contracts:services:. .venv/bin/python -m bench.takeover --replicas 1
    PYTHONPATH=contracts:services:. .venv/bin/python -m bench.takeover --replicas 1 --spare
    PYTHONPATH=contracts:services:. .venv/bin/python -m bench.takeover --replicas 2
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import os
import random
import re
import signal
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.local_system import local_system
from bench.shadow_cost import percentile
from o_contracts import subjects
from o_contracts.envelope import decode
from o_devtools.supervisor import ServiceSpec, Supervisor
from o_runtime.eventlog import EventLog
from tests.fakes.openai_server import FakeOpenAI, Reply

TOOL_STEPS = 3
EXPECTED_TYPES = [
    "user_message",
    *["tool_call_message", "tool_return_message"] * TOOL_STEPS,
    "assistant_message",
]
MARKER = re.compile(r"takeover-run-\d+")
# Each run (and the wait for the process the kill took to come back) must end within this.
DEADLINE = 120.0
# Each kill is an isolated crash, which the Supervisor answers at once (o_devtools/
# supervisor.py: after a stable run); its backoff is for crash loops, not measured here.
RESTART_AFTER = 0.0
# After a kill, how long a restarted replica is given to start before the next run.
SETTLE = 3.0


@dataclass
class Asked:
    at: float
    server: int
    marker: str


@dataclass
class Script:
    """What every model server answers, and the log of what it was asked."""

    step: float
    loop: asyncio.AbstractEventLoop
    asked: list[Asked] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set at every request (the servers answer on threads of their own).
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def reply(self, server: int, body: dict[str, Any]) -> Reply:
        now = time.monotonic()
        found = MARKER.search(json.dumps(body.get("messages", [])))
        marker = found.group(0) if found else ""
        with self.lock:
            self.asked.append(Asked(now, server, marker))
        self.loop.call_soon_threadsafe(self.arrived.set)
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        if done < TOOL_STEPS:
            return Reply(
                tool_calls=[("conversation_search", {"query": f"step {done}"})], delay=self.step
            )
        return Reply(content=f"done {marker}", delay=self.step)

    def of(self, marker: str) -> list[Asked]:
        with self.lock:
            return [a for a in self.asked if a.marker == marker]


@dataclass
class Killed:
    marker: str
    agent_id: str
    resume: float
    extra: float
    total: float


def executor_of(supervisor: Supervisor, base_url: str) -> int | None:
    """The live executor process that asks the model server at `base_url`."""
    for pid in supervisor.pids("executor"):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"OPENAI_BASE_URL={base_url}".encode() in environ:
            return pid
    return None


async def new_agent(http: httpx.AsyncClient) -> str:
    response = await http.post(
        "/v1/agents/",
        json={"model": "openai/gpt-4o-mini"},
    )
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def send(http: httpx.AsyncClient, agent_id: str, marker: str) -> dict[str, Any]:
    response = await http.post(
        f"/v1/agents/{agent_id}/messages",
        json={"messages": [{"role": "user", "content": marker}]},
        timeout=DEADLINE,
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def first_request(script: Script, marker: str) -> Asked:
    async with asyncio.timeout(DEADLINE):
        while True:
            script.arrived.clear()
            if script.of(marker):
                break
            await script.arrived.wait()
    return script.of(marker)[0]


async def undisturbed(
    http: httpx.AsyncClient, script: Script, runs: int
) -> tuple[float, float, list[tuple[str, str]]]:
    """(median duration, median time to the first model request, the runs) of runs
    nothing disturbs."""
    durations, firsts, done = [], [], []
    for i in range(runs):
        agent_id = await new_agent(http)
        marker = f"takeover-run-{i}"
        start = time.monotonic()
        await send(http, agent_id, marker)
        durations.append(time.monotonic() - start)
        firsts.append(script.of(marker)[0].at - start)
        done.append((agent_id, marker))
    return statistics.median(durations), statistics.median(firsts), done


async def one_kill(
    http: httpx.AsyncClient,
    supervisor: Supervisor,
    servers: list[FakeOpenAI],
    script: Script,
    index: int,
    duration: float,
    first: float,
    rng: random.Random,
    spare: bool,
) -> Killed | None:
    agent_id = await new_agent(http)
    marker = f"takeover-run-{index}"
    start = time.monotonic()
    task = asyncio.create_task(send(http, agent_id, marker))
    await first_request(script, marker)
    # Anywhere in the rest of the run but its last moments (the answer being recorded).
    await asyncio.sleep(rng.uniform(0.0, max(0.0, duration - first - 0.1)))
    holder = script.of(marker)[-1].server
    pid = executor_of(supervisor, servers[holder].base_url)
    restarts = supervisor.restart_count("executor")
    if pid is None or task.done():
        await task
        return None
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    await task
    done_at = time.monotonic()
    after = [a.at for a in script.of(marker) if a.at > killed_at]
    resume = (min(after) if after else done_at) - killed_at
    await asyncio.wait_for(supervisor.wait_for_restarts("executor", restarts + 1), DEADLINE)
    # The restarted replica starts (imports, connections) before the next run's kill.
    await asyncio.sleep(SETTLE)
    if spare:
        await asyncio.wait_for(supervisor.wait_spare_loaded("executor"), DEADLINE)
    return Killed(
        marker,
        agent_id,
        resume,
        (done_at - start) - duration,
        done_at - start,
    )


async def exactly_once(
    http: httpx.AsyncClient, nats_url: str, script: Script, runs: list[tuple[str, str]]
) -> list[str]:
    """What is wrong with the runs (empty: each happened exactly once)."""
    wrong = []
    for agent_id, marker in runs:
        rows = (await http.get(f"/v1/agents/{agent_id}/messages")).json()
        types = [m["message_type"] for m in rows if m["message_type"] != "system_message"]
        if types != EXPECTED_TYPES:
            shown = [f"{m['message_type']}({call_of(m)})" for m in rows]
            wrong.append(f"{marker}: messages {' '.join(shown)}")
        asked = len(script.of(marker))
        if not TOOL_STEPS + 1 <= asked <= TOOL_STEPS + 2:
            wrong.append(f"{marker}: the model asked {asked} times")
    log = await EventLog.connect(nats_url, "bench")
    try:
        agents = {agent_id for agent_id, _ in runs}
        counts: Counter[tuple[str, str]] = Counter()
        recorded: dict[str, list[str]] = {}
        async for raw in log.replay(subjects.AGENT_EVENTS):
            event = decode(raw.data)
            if event.aggregate_id not in agents:
                continue
            counts[(event.aggregate_id, event.type)] += 1
            call = getattr(event.data, "tool_call_id", "")
            recorded.setdefault(event.aggregate_id, []).append(
                f"{raw.seq}:{event.type}{f'({call})' if call else ''}"
            )
    finally:
        await log.close()
    for agent_id, marker in runs:
        for kind in ("RunStarted", "RunCompleted"):
            if counts[(agent_id, kind)] != 1:
                wrong.append(f"{marker}: {kind} x{counts[(agent_id, kind)]}")
    for agent_id, marker in runs:
        if any(w.startswith(f"{marker}:") for w in wrong):
            wrong.append(f"{marker}: the log: {' '.join(recorded.get(agent_id, []))}")
    return wrong


def call_of(message: dict[str, Any]) -> str:
    call = (message.get("tool_call") or {}).get("tool_call_id") or message.get("tool_call_id")
    return str(call or "")


def figures(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"min {min(ms):7.0f}   p50 {percentile(ms, 0.5):7.0f}   p99 {percentile(ms, 0.99):7.0f}"
        f"   max {max(ms):7.0f}"
    )


async def main(
    replicas: int, kills: int, baseline: int, step: float, seed: int, spare: bool = False
) -> int:
    script = Script(step, asyncio.get_running_loop())
    servers = [FakeOpenAI() for _ in range(replicas)]
    for i, server in enumerate(servers):
        server.default_reply = functools.partial(script.reply, i)
        # Tool call ids unique across the servers, as a provider's are (each counts `call_<n>`
        # from 1: a run taken over by the other replica would get an id it had already used).
        server._call_ids = itertools.count(1 + i * 1_000_000)
        server.start()
    specs = [ServiceSpec.module(s, f"o_{s}") for s in ("gateway", "memory")] + [
        ServiceSpec.module(
            "executor", "o_executor", env={"OPENAI_BASE_URL": server.base_url}, spare=spare
        )
        for server in servers
    ]
    rng = random.Random(seed)
    try:
        # The Supervisor restarts a killed process after RESTART_AFTER every time (by default
        # it backs off while the process lived under 30 s, as each does here).
        async with local_system(
            servers[0].base_url, specs=specs, restart_after=RESTART_AFTER
        ) as system:
            http = system.http
            duration, first, calm = await undisturbed(http, script, baseline)
            if spare:
                await asyncio.wait_for(system.supervisor.wait_spare_loaded("executor"), DEADLINE)
            print(
                f"{replicas} executor replica(s){' with a spare' if spare else ''};"
                f" undisturbed run ({TOOL_STEPS + 1} model steps"
                f" of {step:g}s): median {duration * 1000:.0f} ms over {baseline} runs"
            )
            done: list[Killed] = []
            index = baseline
            while len(done) < kills:
                killed = await one_kill(
                    http, system.supervisor, servers, script, index, duration, first, rng, spare
                )
                index += 1
                if killed is not None:
                    done.append(killed)
            print(f"{kills} kills (kill -9 of the executor holding the run), ms:")
            print(f"  kill to next step: {figures([k.resume for k in done])}")
            print(f"  extra run time:    {figures([k.extra for k in done])}")
            runs = calm + [(k.agent_id, k.marker) for k in done]
            wrong = await exactly_once(http, system.servers.nats.url, script, runs)
            reasked = sum(len(script.of(k.marker)) - (TOOL_STEPS + 1) for k in done)
            print(
                f"exactly once: {len(runs) - len({w.split(':')[0] for w in wrong})}/{len(runs)}"
                f" runs; model steps asked again (in flight at the kill): {reasked}"
            )
            for line in wrong:
                print(f"  WRONG {line}")
            return 1 if wrong else 0
    finally:
        for server in servers:
            server.stop()


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2, choices=(1, 2))
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--baseline", type=int, default=5)
    parser.add_argument("--step", type=float, default=0.3, help="each model answer's delay (s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--spare", action="store_true", help="keep a loaded spare executor (o_runtime/standby.py)"
    )
    args = parser.parse_args()
    raise SystemExit(
        asyncio.run(
            main(args.replicas, args.kills, args.baseline, args.step, args.seed, args.spare)
        )
    )


if __name__ == "__main__":
    cli()
