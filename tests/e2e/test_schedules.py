"""Scheduled runs (issue 22, O's extension): schedules made, listed, changed and deleted over
HTTP (and NATS), each slot firing exactly once as an ordinary run of its agent, also while
the scheduler's process and the executors are killed and while more schedulers race, and
a deleted agent taking its schedules with it. Bad input is refused naming the field."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import nats
import pytest

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.projection_names import RUNS, SCHEDULES
from o_contracts.schedule_commands import CreateSchedule
from o_contracts.schedules import ScheduledMessage, ScheduleSpec
from o_runtime.commands import REPLY_HEADER, decode_reply
from o_runtime.db import connect_pool
from o_runtime.eventlog import EventLog
from o_schedules.timer import Timer
from tests.e2e.conftest import System
from tests.e2e.support import (
    AgentEvents,
    connected,
    last_command,
    new_agent,
    projected,
    subject_events,
    until,
)
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.servers import operator

pytestmark = pytest.mark.e2e
DEADLINE = 60.0
EVERY_SECOND = "* * * * * *"


async def create(system: System, agent_id: str, **body: Any) -> dict[str, Any]:
    if "input" not in body:
        body.setdefault("messages", [{"role": "user", "content": "tick"}])
    response = await system.http.post(f"/v1/agents/{agent_id}/schedules", json=body)
    assert response.status_code == 201, response.text
    schedule: dict[str, Any] = response.json()
    return schedule


async def patch(system: System, schedule: dict[str, Any], **changes: Any) -> dict[str, Any]:
    url = f"/v1/agents/{schedule['agent_id']}/schedules/{schedule['id']}"
    response = await system.http.patch(url, json=changes)
    assert response.status_code == 200, response.text
    changed: dict[str, Any] = response.json()
    return changed


@asynccontextmanager
async def schedule_events(system: System, schedule_id: str) -> AsyncIterator[AgentEvents]:
    async with subject_events(system, subjects.schedule_subject(schedule_id)) as events:
        yield events


async def recorded(system: System, subject: str) -> list[Envelope[Any]]:
    """Everything on `subject`, read back from the log."""
    log = await EventLog.connect(system.env["NATS_URL"], "test")
    try:
        return [r.envelope for r in await log.read_subject(subject)]
    finally:
        await log.close()


def fired(events: list[Envelope[Any]]) -> list[Any]:
    return [e.data for e in events if e.type == "ScheduleFired"]


async def runs_finished(system: System, agent_id: str, run_ids: set[str]) -> list[Envelope[Any]]:
    """The agent's events once every run in `run_ids` has completed (and the runs
    projection shows it)."""
    async with subject_events(system, subjects.agent_subject(agent_id)) as events:
        try:
            await events.wait_until(
                lambda _: (
                    run_ids <= {e.data.run_id for e in events.seen if e.type == "RunCompleted"}
                ),
                DEADLINE,
            )
        except TimeoutError:
            done = {e.data.run_id for e in events.seen if e.type == "RunCompleted"}
            raise AssertionError(f"runs never completed: {sorted(run_ids - done)}") from None
    await projected(system, events.last_seq, RUNS)
    return events.seen


def once_each(agent_events: list[Envelope[Any]], run_ids: list[str]) -> None:
    """Every run started and completed exactly once, and no other run started."""
    started = Counter(e.data.run_id for e in agent_events if e.type == "RunStarted")
    completed = Counter(e.data.run_id for e in agent_events if e.type == "RunCompleted")
    assert started == Counter(run_ids)
    assert completed == Counter(run_ids)


def consecutive_seconds(slots: list[datetime]) -> None:
    assert slots == sorted(set(slots))
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(slots))


async def kill(system: System, *services: str) -> None:
    """SIGKILL every replica of `services`; return once the supervisor restarted them."""
    restarts = {s: system.supervisor.restart_count(s) for s in services}
    killed = {s: system.supervisor.pids(s) for s in services}
    for pids in killed.values():
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    for s in services:
        await asyncio.wait_for(
            system.supervisor.wait_for_restarts(s, restarts[s] + len(killed[s])), DEADLINE
        )


async def test_a_one_shot_fires_once_and_its_run_sends_the_message(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="good morning to you"))
    at = datetime.now(UTC) + timedelta(seconds=1.5)
    schedule = await create(
        system,
        agent["id"],
        at=at.isoformat(),
        messages=[{"role": "user", "content": "wake up"}],
        name="alarm",
    )
    assert schedule["status"] == "active"
    assert schedule["next_fire_at"] == [at.isoformat()]
    async with schedule_events(system, schedule["id"]) as events:
        fire = await events.wait_until(lambda e: e.type == "ScheduleFired", DEADLINE)
    run_id = fire.data.run_id
    assert fire.data.slot == at
    assert fire.data.late is False
    # The fire was decided at its time (the scheduler sleeps until the next slot).
    assert fire.time - at < timedelta(seconds=5)
    agent_events = await runs_finished(system, agent["id"], {run_id})
    once_each(agent_events, [run_id])

    run = (await system.http.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["agent_id"], run["background"]) == ("completed", agent["id"], True)
    assert run["request_config"]["schedule_id"] == schedule["id"]
    assert run["request_config"]["scheduled_for"] == at.isoformat()
    messages = (await system.http.get(f"/v1/runs/{run_id}/messages")).json()
    shown = [(m["message_type"], m.get("content")) for m in messages]
    assert shown == [("user_message", "wake up"), ("assistant_message", "good morning to you")]
    # The run used the agent's model and its usage is recorded as any run's.
    usage = (await system.http.get(f"/v1/runs/{run_id}/usage")).json()
    assert usage["total_tokens"] > 0

    await projected(system, events.last_seq, SCHEDULES)
    url = f"/v1/agents/{agent['id']}/schedules/{schedule['id']}"
    done = (await system.http.get(url)).json()
    assert (done["status"], done["fires"], done["next_fire_at"]) == ("completed", 1, [])
    assert (done["last_run_id"], done["last_fired_slot"]) == (run_id, at.isoformat())
    fires = (await system.http.get(f"{url}/fires")).json()
    assert [(f["run_id"], f["slot"], f["late"]) for f in fires] == [(run_id, at.isoformat(), False)]
    # A one-shot fires once: nothing more is due, ever.
    log = await recorded(system, subjects.schedule_subject(schedule["id"]))
    assert [e.type for e in log] == ["ScheduleCreated", "ScheduleFired"]


async def test_a_cron_every_second_fires_each_slot_once_until_disabled(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    schedule = await create(system, agent["id"], cron=EVERY_SECOND, timezone="Asia/Tokyo")
    assert len(schedule["next_fire_at"]) == 5
    async with schedule_events(system, schedule["id"]) as events:
        await events.wait_for("ScheduleFired", 3)
    disabled = await patch(system, schedule, enabled=False)
    assert (disabled["enabled"], disabled["status"], disabled["next_fire_at"]) == (
        False,
        "disabled",
        [],
    )
    log = await recorded(system, subjects.schedule_subject(schedule["id"]))
    fires = fired(log)
    assert len(fires) >= 3
    consecutive_seconds([f.slot for f in fires])
    run_ids = [f.run_id for f in fires]
    assert len(set(run_ids)) == len(run_ids)
    agent_events = await runs_finished(system, agent["id"], set(run_ids))
    once_each(agent_events, run_ids)
    # Nothing fired after it was disabled (the runs took their time meanwhile).
    log = await recorded(system, subjects.schedule_subject(schedule["id"]))
    assert log[-1].type == "ScheduleUpdated"
    assert fired(log) == fires


async def test_killing_the_scheduler_and_the_executors_loses_and_repeats_no_slot(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    held = threading.Event()
    llm.push(Reply(content="killed while answering", release=held))
    schedule = await create(system, agent["id"], cron=EVERY_SECOND)
    try:
        async with schedule_events(system, schedule["id"]) as events:
            await events.wait_for("ScheduleFired")
            # The first fire's run is at the model: kill the scheduler's process and every
            # executor while it is in flight and more slots come due.
            await until(llm, lambda requests: len(requests) >= 1)
            await kill(system, "evolution", "executor")
            held.set()
            # The scheduler killed again the moment a slot fires (before or while its
            # run is handed to the executor).
            seen = len(fired(events.seen))
            await events.wait_for("ScheduleFired", seen + 1)
            await kill(system, "evolution")
            await events.wait_for("ScheduleFired", seen + 4)
        await patch(system, schedule, enabled=False)
    finally:
        held.set()
    log = await recorded(system, subjects.schedule_subject(schedule["id"]))
    fires = fired(log)
    # Every slot from the first to the last, once; none was late (the outages were
    # shorter than the grace), none skipped.
    consecutive_seconds([f.slot for f in fires])
    assert [f.late for f in fires] == [False] * len(fires)
    assert "ScheduleSlotsSkipped" not in [e.type for e in log]
    run_ids = [f.run_id for f in fires]
    agent_events = await runs_finished(system, agent["id"], set(run_ids))
    once_each(agent_events, run_ids)


async def test_slots_missed_while_no_scheduler_ran_follow_the_policy(system: System) -> None:
    """run_once: of the slots that passed while the scheduler's process was stopped (longer
    than the grace), the latest runs late and the others are recorded as skipped."""
    agent = await new_agent(system)
    schedule = await create(
        system, agent["id"], cron=EVERY_SECOND, grace_seconds=1, missed="run_once"
    )
    async with schedule_events(system, schedule["id"]) as events:
        await events.wait_for("ScheduleFired")
        stopped = system.supervisor.pids("evolution")
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        try:
            # The outage itself (not a synchronisation): slots come due, and pass their
            # grace, while no scheduler runs.
            await asyncio.sleep(4)
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
        await events.wait_for("ScheduleSlotsSkipped")
        await events.wait_for("ScheduleFired", len(fired(events.seen)) + 2)
    await patch(system, schedule, enabled=False)
    log = await recorded(system, subjects.schedule_subject(schedule["id"]))
    skips = [e.data for e in log if e.type == "ScheduleSlotsSkipped"]
    fires = fired(log)
    # The outage's skip is the longest: a scheduler over the 1 s grace late at another slot
    # (a loaded machine) skips and runs late there too, by the same policy.
    skip = max(skips, key=lambda s: s.count)
    # The latest missed slot ran, late, right after the skipped ones; every second from the
    # first fire to the last was fired or skipped, once.
    assert skip.count >= 2 and skip.counted_all
    (after,) = [f for f in fires if f.slot == skip.last + timedelta(seconds=1)]
    assert after.late
    skipped = [s.first + timedelta(seconds=n) for s in skips for n in range(s.count)]
    assert all(s.first + timedelta(seconds=s.count - 1) == s.last for s in skips)
    consecutive_seconds(sorted([f.slot for f in fires] + skipped))
    run_ids = [f.run_id for f in fires]
    once_each(await runs_finished(system, agent["id"], set(run_ids)), run_ids)


async def test_a_one_shot_made_while_the_scheduler_is_down_fires_when_it_is_back(
    system: System, llm: FakeOpenAI
) -> None:
    """The gateway accepts a one-shot a second ahead and sends its command; the scheduler
    is stopped until that second has passed. Judged as of when it was asked, the command
    makes the schedule, which fires at once (on time: within its grace), and the request
    is answered 201. (Found by the chaos suite: it was refused, 422 "not in the future".)"""
    agent = await new_agent(system)
    llm.push(Reply(content="on my way"))
    at = datetime.now(UTC) + timedelta(seconds=1)
    stopped = system.supervisor.pids("evolution")
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        made = asyncio.create_task(
            system.http.post(
                f"/v1/agents/{agent['id']}/schedules",
                json={"at": at.isoformat(), "messages": [{"role": "user", "content": "go"}]},
            )
        )
        async with connected(system) as nc:
            subject = subjects.schedule_command_subject(agent["id"])
            while True:  # the gateway has sent the command
                try:
                    await last_command(nc, subject)
                    break
                except nats.js.errors.NotFoundError:
                    await asyncio.sleep(0.05)
        # The outage itself (not a synchronisation): the one-shot's time passes while no
        # scheduler runs.
        await asyncio.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()) + 0.5)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    response = await asyncio.wait_for(made, DEADLINE)
    assert response.status_code == 201, response.text
    schedule = response.json()
    async with schedule_events(system, schedule["id"]) as events:
        fire = await events.wait_until(lambda e: e.type == "ScheduleFired", DEADLINE)
    assert (fire.data.slot, fire.data.late) == (at, False)
    once_each(await runs_finished(system, agent["id"], {fire.data.run_id}), [fire.data.run_id])


async def test_more_schedulers_racing_fire_each_slot_once(system: System, llm: FakeOpenAI) -> None:
    """Two more timers (as more replicas would run) beside the evolution service's own."""
    log = await EventLog.connect(system.env["NATS_URL"], "test-timers")
    pool = await connect_pool(system.env["DATABASE_URL"], max_size=4)
    timers = [Timer(log, pool), Timer(log, pool)]
    agent = await new_agent(system)
    try:
        for timer in timers:
            await timer.start()
        schedules = [await create(system, agent["id"], cron=EVERY_SECOND) for _ in range(2)]
        for schedule in schedules:
            async with schedule_events(system, schedule["id"]) as events:
                await events.wait_for("ScheduleFired", 4)
            await patch(system, schedule, enabled=False)
    finally:
        for timer in timers:
            await timer.stop()
        await pool.close()
        await log.close()
    run_ids: list[str] = []
    for schedule in schedules:
        fires = fired(await recorded(system, subjects.schedule_subject(schedule["id"])))
        assert len(fires) >= 4
        consecutive_seconds([f.slot for f in fires])
        run_ids += [f.run_id for f in fires]
    once_each(await runs_finished(system, agent["id"], set(run_ids)), run_ids)


async def test_a_deleted_agent_takes_its_schedules_with_it(system: System) -> None:
    agent = await new_agent(system)
    kept = await new_agent(system)
    schedules = [
        await create(system, agent["id"], cron="0 7 * * *"),
        await create(system, agent["id"], at=(datetime.now(UTC) + timedelta(hours=1)).isoformat()),
    ]
    other = await create(system, kept["id"], cron="0 7 * * *")
    assert (await system.http.delete(f"/v1/agents/{agent['id']}")).status_code == 200
    last = 0
    for schedule in schedules:
        async with schedule_events(system, schedule["id"]) as events:
            deleted = await events.wait_until(lambda e: e.type == "ScheduleDeleted", DEADLINE)
            assert deleted.data.reason == "agent_deleted"
            last = max(last, events.last_seq)
    await projected(system, last, SCHEDULES)
    conn = await asyncpg.connect(system.env["DATABASE_URL"])
    try:
        left = await conn.fetch("SELECT id FROM schedules WHERE agent_id = $1", agent["id"])
    finally:
        await conn.close()
    assert left == []
    gone = await system.http.get(f"/v1/agents/{agent['id']}/schedules")
    assert gone.status_code == 404
    listed = (await system.http.get(f"/v1/agents/{kept['id']}/schedules")).json()
    assert [s["id"] for s in listed] == [other["id"]]


async def test_schedules_are_listed_changed_and_deleted(system: System) -> None:
    agent = await new_agent(system, timezone="Europe/Paris")
    base = f"/v1/agents/{agent['id']}/schedules"
    morning = await create(
        system,
        agent["id"],
        cron="0 7 * * *",
        input="Good morning: what is on today?",
        missed="run_each",
        max_catch_up=3,
        grace_seconds=120,
    )
    # The agent's time zone by default: 07:00 in Paris is 06:00 or 05:00 UTC.
    assert morning["timezone"] == "Europe/Paris"
    assert morning["messages"] == [{"role": "user", "content": "Good morning: what is on today?"}]
    firsts = [datetime.fromisoformat(t) for t in morning["next_fire_at"]]
    assert len(firsts) == 5
    paris = [t.astimezone(ZoneInfo("Europe/Paris")) for t in firsts]
    assert [(t.hour, t.minute) for t in paris] == [(7, 0)] * 5
    assert [(b.date() - a.date()).days for a, b in itertools.pairwise(paris)] == [1] * 4
    assert (morning["missed"], morning["max_catch_up"], morning["grace_seconds"]) == (
        "run_each",
        3,
        120,
    )
    later = await create(system, agent["id"], at="2099-01-01T09:00:00", timezone="America/New_York")
    assert later["next_fire_at"] == ["2099-01-01T14:00:00+00:00"]
    listed = (await system.http.get(base)).json()
    assert [s["id"] for s in listed] == [morning["id"], later["id"]]

    off = await patch(system, morning, enabled=False)
    assert (off["status"], off["next_fire_at"]) == ("disabled", [])
    on = await patch(system, morning, enabled=True, cron="30 6 * * 1-5", timezone="UTC")
    assert on["status"] == "active"
    assert on["cron"] == "30 6 * * 1-5" and on["timezone"] == "UTC"
    assert all(datetime.fromisoformat(t).weekday() < 5 for t in on["next_fire_at"])
    assert on["messages"] == morning["messages"]
    moved = await patch(system, later, cron="0 12 * * *")
    assert (moved["cron"], moved["at"]) == ("0 12 * * *", None)

    gone = await system.http.delete(f"{base}/{morning['id']}")
    assert gone.status_code == 200 and gone.json() == {"id": morning["id"], "deleted": True}
    assert (await system.http.get(f"{base}/{morning['id']}")).status_code == 404
    assert (await system.http.delete(f"{base}/{morning['id']}")).status_code == 404
    assert [s["id"] for s in (await system.http.get(base)).json()] == [later["id"]]


async def test_a_create_retried_with_an_idempotency_key_makes_one_schedule(
    system: System,
) -> None:
    agent = await new_agent(system)
    key = {"Idempotency-Key": f"schedule-{uuid.uuid4()}"}
    body = {"cron": "0 9 * * *", "messages": [{"role": "user", "content": "standup"}]}
    url = f"/v1/agents/{agent['id']}/schedules"
    made = [(await system.http.post(url, json=body, headers=key)).json() for _ in "ab"]
    assert made[0]["id"] == made[1]["id"]
    assert [s["id"] for s in (await system.http.get(url)).json()] == [made[0]["id"]]


def refused(response: Any, field: str, says: str) -> None:
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert any(field in e["loc"] and says in e["msg"] for e in detail), detail


async def test_bad_schedules_are_refused_naming_the_field(system: System) -> None:
    agent = await new_agent(system)
    url = f"/v1/agents/{agent['id']}/schedules"
    tick = [{"role": "user", "content": "tick"}]
    post = system.http.post
    refused(await post(url, json={"cron": "61 * * * *", "messages": tick}), "cron", "not a valid")
    refused(await post(url, json={"cron": "* * *", "messages": tick}), "cron", "has 3 fields")
    refused(await post(url, json={"cron": "0 0 30 2 *", "messages": tick}), "cron", "never fires")
    unknown = {"cron": "0 7 * * *", "timezone": "Mars/Olympus", "messages": tick}
    refused(await post(url, json=unknown), "timezone", "not an IANA time zone")
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    refused(await post(url, json={"at": past, "messages": tick}), "at", "not in the future")
    both = {"cron": "0 7 * * *", "at": "2099-01-01T00:00:00Z", "messages": tick}
    refused(await post(url, json=both), "body", "not both")
    refused(await post(url, json={"messages": tick}), "body", "give `cron`")
    refused(await post(url, json={"cron": "0 7 * * *"}), "body", "`messages` or `input`")
    refused(
        await post(url, json={"cron": "0 7 * * *", "messages": tick, "missed": "all"}), "missed", ""
    )
    refused(await post(url, json={"cron": "0 7 * * *", "messages": tick, "crn": "x"}), "crn", "")
    # An agent whose own time zone is not one: the schedule must name one.
    odd = await new_agent(system, timezone="Local Time")
    refused(
        await post(
            f"/v1/agents/{odd['id']}/schedules", json={"cron": "0 7 * * *", "messages": tick}
        ),
        "timezone",
        "the agent's timezone",
    )
    schedule = await create(system, agent["id"], cron="0 7 * * *")
    one = f"{url}/{schedule['id']}"
    refused(await system.http.patch(one, json={"cron": "0 25 * * *"}), "cron", "not a valid")
    refused(await system.http.patch(one, json={"at": past}), "at", "not in the future")
    # Nothing changed.
    assert (await system.http.get(one)).json()["cron"] == "0 7 * * *"
    missing = f"{url}/schedule-{uuid.uuid4()}"
    assert (await system.http.get(missing)).status_code == 404
    assert (await system.http.patch(missing, json={"enabled": False})).status_code == 404
    assert (await system.http.get(f"{url}/not-an-id")).status_code == 422
    nobody = f"/v1/agents/agent-{uuid.uuid4()}/schedules"
    assert (await post(nobody, json={"cron": "0 7 * * *", "messages": tick})).status_code == 404


async def test_an_outside_system_makes_a_schedule_over_nats(system: System) -> None:
    agent = await new_agent(system)
    spec = ScheduleSpec(cron="0 8 * * *", messages=[ScheduledMessage(content="from outside")])
    schedule_id = f"schedule-{uuid.uuid4()}"

    async def publish(command: CreateSchedule) -> Any:
        nc = await nats.connect(system.env["NATS_URL"], **operator())
        try:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            envelope = Envelope.wrap(command, aggregate_id=agent["id"], producer="outside")
            await nc.jetstream().publish(
                subjects.schedule_command_subject(agent["id"]),
                envelope.encode(),
                stream=subjects.COMMANDS_STREAM,
                headers={"Nats-Msg-Id": envelope.id, REPLY_HEADER: inbox},
            )
            return decode_reply((await sub.next_msg(timeout=30)).data)
        finally:
            await nc.close()

    made = await publish(CreateSchedule(agent_id=agent["id"], schedule_id=schedule_id, spec=spec))
    assert made.ok, made.error
    await projected(system, made.seq, SCHEDULES)
    shown = (await system.http.get(f"/v1/agents/{agent['id']}/schedules/{schedule_id}")).json()
    assert shown["messages"] == [{"role": "user", "content": "from outside"}]
    bad = spec.model_copy(update={"cron": "0 8 * *", "timezone": "Nowhere/Land"})
    other = f"schedule-{uuid.uuid4()}"
    refusal = await publish(CreateSchedule(agent_id=agent["id"], schedule_id=other, spec=bad))
    assert (refusal.ok, refusal.status) == (False, 422)
    assert refusal.error.startswith("timezone: 'Nowhere/Land' is not an IANA time zone")
