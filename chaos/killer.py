"""SIGKILL, on a schedule derived from the seed, and wait for the system to recover each time.

Targets: each service (`gateway`, `executor`, `memory`, `tool_sandbox`, `evolution`: a live pid
of the supervisor's), `nats` (nats-server), `postgres` (the postmaster) and `pg-backend` (one
Postgres backend running a query: Postgres then ends every backend and recovers from its WAL).
The schedule is rounds of the targets in a seeded order, each kill `interval * U(0.5, 1.5)`
seconds after the system recovered from the previous one, so two runs with one seed (before and
after a fix) kill the same things in the same order.

Recovered means: the target is back (a new pid for a service, nats-server or the postmaster;
Postgres answers for a backend), the gateway's health answers, and a request sent after the kill
was acknowledged, within `recovery_timeout`. A nats-server or postmaster that nobody restarts
within `server_grace` seconds is restarted by the harness (`restart="auto"`, the default, which
then goes on doing so for that target at once), through the supervisor's embedded helpers; the
report says who restarted what.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import httpx

from chaos.load import Clock, Load
from chaos.system import SERVICES, System, alive

SERVERS = ("nats", "postgres", "pg-backend")
TARGETS = (*SERVICES, *SERVERS)
RestartMode = Literal["auto", "supervisor", "harness"]


@dataclass
class Kill:
    number: int
    target: str
    at: float  # the load's clock
    pid: int | None
    detail: str = ""
    back_at: float | None = None  # the target is back (a new process, Postgres answers)
    recovered_at: float | None = None  # ... and requests are acknowledged again
    restarted_by: str = ""
    note: str = ""

    @property
    def recovery(self) -> float | None:
        return None if self.recovered_at is None else self.recovered_at - self.at

    def describe(self) -> str:
        back = "back in " + (f"{self.back_at - self.at:.1f}s" if self.back_at else "?") + ", "
        back += (
            f"serving again in {self.recovery:.1f}s"
            if self.recovery is not None
            else "NOT serving again"
        )
        by = f", restarted by {self.restarted_by}" if self.restarted_by else ""
        note = f"; {self.note}" if self.note else ""
        return (
            f"#{self.number} t={self.at:.2f}s {self.target} pid {self.pid}"
            f"{' (' + self.detail + ')' if self.detail else ''}: {back}{by}{note}"
        )


def schedule(seed: int, targets: list[str], interval: float) -> Iterator[tuple[float, str, float]]:
    """(delay, target, pick) forever; `pick` in [0, 1) chooses a replica or a backend."""
    rng = random.Random(f"chaos-kill-{seed}")
    while True:
        order = list(targets)
        rng.shuffle(order)
        for target in order:
            yield interval * rng.uniform(0.5, 1.5), target, rng.random()


class Killer:
    def __init__(
        self,
        system: System,
        load: Load,
        http: httpx.AsyncClient,
        clock: Clock,
        *,
        seed: int,
        targets: list[str],
        interval: float,
        recovery_timeout: float = 90.0,
        server_grace: float = 10.0,
        restart: RestartMode = "auto",
    ) -> None:
        self.system = system
        self.load = load
        self.http = http
        self.clock = clock
        self.seed = seed
        self.targets = targets
        self.interval = interval
        self.recovery_timeout = recovery_timeout
        self.server_grace = server_grace
        self.restart = restart
        self.kills: list[Kill] = []
        # Per server: None until known, then whether the supervisor restarts it.
        self.supervisor_restarts: dict[str, bool | None] = {"nats": None, "postgres": None}

    async def run(self, until: float) -> None:
        """Kill on schedule until the load's clock passes `until`; the last kill is recovered
        from (or given up on) before returning."""
        if not self.targets:
            return
        for number, (delay, target, pick) in enumerate(
            schedule(self.seed, self.targets, self.interval), 1
        ):
            if self.clock() + delay >= until:
                return
            await asyncio.sleep(delay)
            kill = await self._kill(number, target, pick)
            self.kills.append(kill)
            await self._recover(kill)

    async def _kill(self, number: int, target: str, pick: float) -> Kill:
        if target in SERVICES:
            pids = self.system.service_pids().get(target, [])
            if not pids:
                return Kill(number, target, self.clock(), None, note="no live process to kill")
            index = int(pick * len(pids))
            pid = pids[index]
            detail = f"replica {index}" if len(pids) > 1 else ""
        elif target == "nats":
            found = self.system.nats_pid()
            if found is None:
                return Kill(number, target, self.clock(), None, note="nats-server not running")
            pid, detail = found, ""
        elif target == "postgres":
            found = self.system.postmaster_pid()
            if found is None:
                return Kill(number, target, self.clock(), None, note="postmaster not running")
            pid, detail = found, "postmaster"
        else:
            chosen = await self._busy_backend(pick)
            if chosen is None:
                return Kill(number, target, self.clock(), None, note="no client backend found")
            pid, detail = chosen
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return Kill(number, target, self.clock(), pid, detail)

    async def _busy_backend(self, pick: float) -> tuple[int, str] | None:
        """A client backend running a query (waiting up to 3 s for one), else any client backend."""
        import asyncpg

        try:
            conn = await asyncpg.connect(self.system.database_url, timeout=5)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return None
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 3.0
            while True:
                rows = await conn.fetch(
                    "SELECT pid, state, query FROM pg_stat_activity"
                    " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                    " AND datname = current_database() ORDER BY pid"
                )
                active = [r for r in rows if r["state"] == "active"]
                if active or loop.time() > deadline:
                    break
                await asyncio.sleep(0.002)
            candidates = active or list(rows)
            if not candidates:
                return None
            row = candidates[int(pick * len(candidates))]
            query = " ".join(str(row["query"]).split())[:140]
            return int(row["pid"]), f"{row['state']}: {query}"
        finally:
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)

    async def _recover(self, kill: Kill) -> None:
        if kill.pid is None:
            kill.back_at = kill.recovered_at = self.clock()
            return
        deadline = kill.at + self.recovery_timeout
        try:
            if kill.target in SERVICES:
                await self._until(deadline, lambda: self._service_back(kill))
                kill.restarted_by = "supervisor"
            elif kill.target in ("nats", "postgres"):
                await self._server_back(kill, deadline)
            else:
                await self._until_async(deadline, self._postgres_answers)
                kill.restarted_by = "postgres (crash recovery)"
            kill.back_at = self.clock()
            await self._until_async(deadline, self._healthy)
            # Once the load is over nothing new is sent: health is then the last word.
            await self._until(
                deadline, lambda: self.load.acked_since(kill.at) or self.load.ended_at is not None
            )
            kill.recovered_at = self.clock()
        except TimeoutError:
            kill.note = (kill.note + "; " if kill.note else "") + (
                f"not recovered within {self.recovery_timeout:.0f}s"
            )

    def _service_back(self, kill: Kill) -> bool:
        pids = self.system.service_pids().get(kill.target, [])
        return bool(pids) and kill.pid not in pids

    async def _server_back(self, kill: Kill, deadline: float) -> None:
        name = kill.target
        current = self.system.nats_pid if name == "nats" else self.system.postmaster_pid
        known = self.supervisor_restarts[name]
        wait_for_supervisor = self.restart == "supervisor" or (
            self.restart == "auto" and known is not False
        )
        if wait_for_supervisor:
            until = deadline if self.restart == "supervisor" else self.clock() + self.server_grace
            with contextlib.suppress(TimeoutError):
                await self._until(min(until, deadline), lambda: current() not in (None, kill.pid))
            if current() not in (None, kill.pid):
                self.supervisor_restarts[name] = True
                kill.restarted_by = "supervisor"
                return
            if self.restart == "supervisor":
                raise TimeoutError
            self.supervisor_restarts[name] = False
            kill.note = f"the supervisor did not restart it within {self.server_grace:.0f}s"
        restart = self.system.restart_nats if name == "nats" else self.system.restart_postgres
        await asyncio.to_thread(restart)
        kill.restarted_by = "harness"
        await self._until(deadline, lambda: alive(current()))

    async def _postgres_answers(self) -> bool:
        import asyncpg

        try:
            conn = await asyncpg.connect(self.system.database_url, timeout=2)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False
        try:
            return bool(await conn.fetchval("SELECT 1"))
        except (OSError, asyncpg.PostgresError):
            return False
        finally:
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)

    async def _healthy(self) -> bool:
        return await self.system.healthy(self.http)

    async def _until(self, deadline: float, condition: Callable[[], bool]) -> None:
        while not condition():
            if self.clock() > deadline:
                raise TimeoutError
            await asyncio.sleep(0.1)

    async def _until_async(self, deadline: float, condition: Callable[[], Awaitable[bool]]) -> None:
        while not await condition():
            if self.clock() > deadline:
                raise TimeoutError
            await asyncio.sleep(0.1)
