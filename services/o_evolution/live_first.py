"""Shadow work yields to users' runs: a case starts when the executor has been idle a
moment, or once it has waited its longest, and never while live queues are backed up.

Why: on a machine users' runs keep busy, niceness alone does not keep shadow work from
slowing them. NATS and Postgres serve the shadow's reads at the same priority as live
ones, and a case that starts between two messages of a busy conversation runs beside the
second. So a case waits for a quiet moment: the executor's consumer shows no run queued
or in flight, and delivered none, for `quiet` seconds. Under steady traffic there may be
no such moment; after `max_yield` seconds a case starts anyway, so an evaluation still
ends (at about one case per `max_yield` while users keep the executor busy). Past
`pause_pending` runs waiting, the live queues are backed up and shadow work waits
however long it takes.

The decision (`turn`) is apart from the sampling (`wait_for_turn`), which asks JetStream
for the executor consumer's state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from o_contracts import subjects
from o_runtime.eventlog import EventLog


@dataclass(frozen=True)
class YieldPolicy:
    # Seconds the executor must have been idle before a case starts.
    quiet: float = 0.05
    # The longest a case waits for a quiet moment while live queues are not backed up.
    max_yield: float = 2.0
    # Runs queued or in flight at the executor above which shadow work waits, whatever
    # the time (live queues backed up).
    pause_pending: int = 20


@dataclass(frozen=True)
class LiveLoad:
    """The executor's consumer as sampled: runs queued or in flight, and how many
    commands it has delivered so far (a change means a run started in between)."""

    busy: int
    delivered: int


@dataclass(frozen=True)
class Watch:
    """What the waiting case has seen: since when it waits, and since when the
    executor is idle (None: not idle at the last sample)."""

    began: float
    idle_since: float | None = None
    last: LiveLoad | None = None


Turn = Literal["start", "wait", "backed_up"]


def observe(watch: Watch, load: LiveLoad, now: float) -> Watch:
    """The watch after one more sample: idle only while nothing is queued or in flight
    and nothing was delivered since the previous sample."""
    unchanged = watch.last is not None and watch.last.delivered == load.delivered
    if load.busy == 0 and (unchanged or watch.last is None):
        idle_since = watch.idle_since if watch.idle_since is not None else now
    else:
        idle_since = None
    return Watch(began=watch.began, idle_since=idle_since, last=load)


def turn(policy: YieldPolicy, watch: Watch, now: float) -> Turn:
    """Whether the case may start now."""
    load = watch.last
    if load is not None and load.busy > policy.pause_pending:
        return "backed_up"
    if watch.idle_since is not None and now - watch.idle_since >= policy.quiet:
        return "start"
    if now - watch.began >= policy.max_yield:
        return "start"
    return "wait"


Sampler = Callable[[], Awaitable[LiveLoad | None]]


def executor_load(eventlog: EventLog) -> Sampler:
    """Samples the executor's command consumer; None when it cannot be read (no executor
    consumer yet, NATS busy): shadow work is then not held up."""

    async def sample() -> LiveLoad | None:
        try:
            info = await eventlog.js.consumer_info(subjects.COMMANDS_STREAM, "executor")
        except Exception:
            return None
        delivered = info.delivered.stream_seq if info.delivered is not None else 0
        return LiveLoad(
            busy=(info.num_pending or 0) + (info.num_ack_pending or 0),
            delivered=delivered or 0,
        )

    return sample


async def wait_for_turn(policy: YieldPolicy, sample: Sampler) -> None:
    """Return when a shadow case may start (see the module's docstring)."""
    watch = Watch(began=time.monotonic())
    backoff = policy.quiet
    while True:
        load = await sample()
        if load is None:
            return
        now = time.monotonic()
        watch = observe(watch, load, now)
        decided = turn(policy, watch, now)
        if decided == "start":
            return
        if decided == "backed_up":
            # No hurry while users queue: ask less often, up to once a second; the
            # longest yield counts again from when the backlog is gone.
            watch = Watch(began=now, last=load)
            backoff = min(backoff * 2, 1.0)
            await asyncio.sleep(backoff)
            continue
        backoff = policy.quiet
        # Sampled twice per quiet period: a quiet moment is seen within 1.5 of them.
        await asyncio.sleep(policy.quiet / 2)
