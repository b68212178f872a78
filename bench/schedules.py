"""1,000 schedules due in the same minute while the scheduler's process and the executor are
killed during it: each fires once, none is missed; fire delay p50 and p99 (issue 22).

One system (embedded NATS and Postgres, the five services, a zero-latency local model in
a process of its own). `--agents` agents share `--schedules` schedules, each a daily cron
with seconds (`S M H * * *`, UTC) whose slot falls in one minute, spread over it (about
17 a second). During that minute the evolution process (which hosts the scheduler) is
SIGKILLed at second 15, the executor at second 30 and both at second 45; the supervisor
starts them again, as `make run` does. Then, from the log: one ScheduleFired per schedule
for its slot (none missing, none twice, none skipped or late), and for each fire one
RunStarted and one RunCompleted of its run, and no other run.

Fire delay: from the slot to its ScheduleFired (the decision, as the log records it).
Run start delay: from the slot to the run's RunStarted (through the executor's queue,
one run at a time per agent).

    PYTHONPATH=contracts:services:. .venv/bin/python -m bench.schedules
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx

from bench.local_system import local_system
from bench.shadow_cost import percentile
from bench.zero_latency_llm import ZeroLatencyLLM
from o_contracts import subjects
from o_contracts.envelope import Envelope, decode
from o_runtime.eventlog import EventLog

SERVICES = ("gateway", "executor", "memory", "tool_sandbox", "evolution")
# Seconds into the minute, and what is killed then.
KILLS = ((15, ("evolution",)), (30, ("executor",)), (45, ("evolution", "executor")))
# The minute starts at least this long after the schedules are expected to be made.
LEAD = timedelta(seconds=10)
# Slots this long after a kill wait for the process to come back (reported apart).
RESTART_WINDOW = timedelta(seconds=10)
# How long after the minute every run must have completed.
FINISH_WITHIN = 180.0


def answer(body: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "done"}


async def made(http: httpx.AsyncClient, path: str, body: dict[str, Any], status: int) -> str:
    response = await http.post(path, json=body)
    assert response.status_code == status, response.text
    return str(response.json()["id"])


async def schedule_all(
    http: httpx.AsyncClient, agent_ids: list[str], slots: list[datetime]
) -> list[str]:
    gate = asyncio.Semaphore(16)

    async def one(i: int, slot: datetime) -> str:
        body = {
            "cron": f"{slot.second} {slot.minute} {slot.hour} * * *",
            "timezone": "UTC",
            "messages": [{"role": "user", "content": f"scheduled {i}"}],
        }
        async with gate:
            return await made(
                http, f"/v1/agents/{agent_ids[i % len(agent_ids)]}/schedules", body, 201
            )

    return list(await asyncio.gather(*(one(i, s) for i, s in enumerate(slots))))


async def kill_during(supervisor: Any, minute: datetime) -> list[str]:
    done = []
    for second, services in KILLS:
        await asyncio.sleep(max(0.0, (minute + timedelta(seconds=second) - now()).total_seconds()))
        for name in services:
            for pid in supervisor.pids(name):
                os.kill(pid, signal.SIGKILL)
        done.append(f":{second:02d} {'+'.join(services)}")
    return done


async def until_completed(dsn: str, count: int, deadline: float) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        while time.monotonic() < deadline:
            finished = await conn.fetchval(
                "SELECT count(*) FROM runs WHERE status = 'completed'"
                " AND request_config ? 'schedule_id'"
            )
            if finished >= count:
                return
            await asyncio.sleep(0.5)
    finally:
        await conn.close()
    raise AssertionError(f"fewer than {count} scheduled runs completed in time")


async def recorded(nats_url: str, subject: str) -> list[Envelope[Any]]:
    log = await EventLog.connect(nats_url, "bench")
    try:
        return [decode(raw.data) async for raw in log.replay(subject)]
    finally:
        await log.close()


def now() -> datetime:
    return datetime.now(UTC)


def ms(values: list[float]) -> str:
    return (
        f"p50 {percentile(values, 0.5):8.1f}   p99 {percentile(values, 0.99):8.1f}"
        f"   max {max(values):8.1f}"
    )


async def main(schedules: int, agents: int) -> None:
    llm = ZeroLatencyLLM(answer)
    llm.start()
    try:
        async with local_system(llm.base_url, SERVICES) as system:
            http = system.http
            agent_ids = [
                await made(http, "/v1/agents/", {"model": "openai/gpt-4o-mini"}, 200)
                for _ in range(agents)
            ]
            # The minute: the first whole one far enough ahead to make every schedule first.
            started = time.monotonic()
            ready = now() + timedelta(seconds=5 + schedules * 0.01) + LEAD
            minute = ready.replace(second=0, microsecond=0) + timedelta(minutes=1)
            slots = [minute + timedelta(seconds=i * 60 // schedules) for i in range(schedules)]
            schedule_ids = await schedule_all(http, agent_ids, slots)
            making = time.monotonic() - started
            assert now() < minute, "making the schedules took past their minute"
            print(
                f"{schedules} schedules over {agents} agents made in {making:.1f}s, due in"
                f" {minute:%H:%M} UTC ({schedules / 60:.0f} a second)"
            )
            kills = await kill_during(system.supervisor, minute)
            print(f"killed during the minute: {', '.join(kills)}")
            dsn = system.servers.postgres.url
            await until_completed(dsn, schedules, time.monotonic() + FINISH_WITHIN)
            report(
                minute,
                schedule_ids,
                await recorded(system.servers.nats.url, subjects.SCHEDULE_EVENTS),
                await recorded(system.servers.nats.url, subjects.AGENT_EVENTS),
            )
    finally:
        llm.stop()


def report(
    minute: datetime,
    schedule_ids: list[str],
    schedule_log: list[Envelope[Any]],
    agent_log: list[Envelope[Any]],
) -> None:
    fires = [e for e in schedule_log if e.type == "ScheduleFired"]
    per_schedule = Counter(e.data.schedule_id for e in fires)
    missing = [s for s in schedule_ids if per_schedule[s] == 0]
    twice = [s for s, n in per_schedule.items() if n > 1]
    skipped = [e for e in schedule_log if e.type == "ScheduleSlotsSkipped"]
    late = [e for e in fires if e.data.late]
    run_ids = {e.data.run_id for e in fires}
    started = Counter(e.data.run_id for e in agent_log if e.type == "RunStarted")
    completed = Counter(e.data.run_id for e in agent_log if e.type == "RunCompleted")
    once = sum(1 for r in run_ids if started[r] == 1 and completed[r] == 1)
    others = set(started) - run_ids
    print(
        f"fired once: {len(per_schedule) - len(twice)}/{len(schedule_ids)}; missed"
        f" {len(missing)}, fired twice {len(twice)}, skipped {len(skipped)}, late {len(late)};"
        f" runs started and completed once: {once}/{len(run_ids)}, other runs {len(others)}"
    )
    fired_at = {e.data.run_id: e.time for e in fires}
    slot_of = {e.data.run_id: e.data.slot for e in fires}
    run_start = {e.data.run_id: e.time for e in agent_log if e.type == "RunStarted"}
    fire_delay = [(fired_at[r] - slot_of[r]).total_seconds() * 1000 for r in run_ids]
    start_delay = [
        (run_start[r] - slot_of[r]).total_seconds() * 1000 for r in run_start if r in slot_of
    ]
    print(f"fire delay (slot to ScheduleFired), ms:   {ms(fire_delay)}")
    print(f"run start delay (slot to RunStarted), ms: {ms(start_delay)}")
    # Slots while nothing had just been killed: what the delays are without an outage.
    kills = [minute + timedelta(seconds=second) for second, _ in KILLS]
    calm = [r for r in run_ids if not any(k <= slot_of[r] < k + RESTART_WINDOW for k in kills)]
    calm_fire = [(fired_at[r] - slot_of[r]).total_seconds() * 1000 for r in calm]
    calm_start = [(run_start[r] - slot_of[r]).total_seconds() * 1000 for r in calm]
    print(f"  the {len(calm)} slots not within {RESTART_WINDOW.seconds}s after a kill:")
    print(f"    fire delay, ms:      {ms(calm_fire)}")
    print(f"    run start delay, ms: {ms(calm_start)}")
    assert not missing and not twice and not skipped and not late, "a slot was lost or repeated"
    assert once == len(run_ids) == len(schedule_ids) and not others, "a run was lost or repeated"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.schedules, args.agents))
