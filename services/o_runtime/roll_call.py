"""The roll call (`o.rpc.roll_call`): every service process says who it is and whether it
is ready; an operator's tool (or the gateway's status route) asks and gathers the answers.

Why over NATS rather than each service's health port: an operator (or the gateway) does
not know where replicas run. `make run` opens no health ports, Kubernetes gives each pod
its own address, and replicas come and go; every process is on NATS, so one request
reaches them all (a plain subscription, no queue group: each replica answers).

There is no way to know how many answers will come, so the asker waits until every
service it expects has answered and no other answer came for a short while (`SETTLE`, or
as long as the answers took to come if longer: `quiet_enough`), or until the deadline: a
process whose readiness checks hang on an unreachable Postgres (2 s at most: readiness.py)
still answers within it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Collection
from datetime import UTC, datetime
from importlib import metadata

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from pydantic import ValidationError

from o_contracts import subjects
from o_contracts.roll_call import Present
from o_runtime.nats_flush import flush
from o_runtime.readiness import Readiness
from o_runtime.watched_answers import stop_answering

log = logging.getLogger(__name__)

# The status nats-server sends to the reply subject when nobody heard a request.
NO_RESPONDERS = "503"
# How long starting waits for the server to have the subscription.
FLUSH_WITHIN = 2
# How long the asker waits for answers at most.
DEADLINE = 2.5
# Once every expected service has answered: how long without a new answer ends the wait.
SETTLE = 0.25
# A process answers within this long, ready or not (its checks have their own timeouts,
# but a Postgres check and a lag check one after the other could pass the deadline).
ANSWER_WITHIN = 2.0


def version() -> str:
    try:
        return metadata.version("o-server")
    except metadata.PackageNotFoundError:
        return "unknown"


def instance_name() -> str:
    """This process among its service's replicas (a pod's hostname is its name)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class RollCallAnswerer:
    """Answers the roll call for one service process."""

    def __init__(self, service: str, readiness: Callable[[], Awaitable[Readiness]]) -> None:
        self.service = service
        self.readiness = readiness
        self.started_at = datetime.now(UTC)
        self.instance = instance_name()
        self._sub: Subscription | None = None
        self._answering: set[asyncio.Task[None]] = set()

    async def start(self, nc: NATS) -> None:
        # Started now, not when made: a spare is made long before it starts
        # (o_runtime/standby.py).
        self.started_at = datetime.now(UTC)
        self._sub = await nc.subscribe(subjects.ROLL_CALL, cb=self._on_call)
        # Started means heard: the subscription on the server before this returns (a roll
        # call published on another connection right after would miss it otherwise). Not
        # a condition of starting: with NATS away, nats-py subscribes again on reconnecting.
        with contextlib.suppress(TimeoutError):
            await flush(nc, FLUSH_WITHIN)

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        await stop_answering(sub, self._answering)

    async def _on_call(self, msg: Msg) -> None:
        if not msg.reply:
            return
        # (A task each: nats-py runs one subscription's callbacks one after another, and a
        # readiness check can wait on Postgres.)
        task = asyncio.create_task(self._answer(msg))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _answer(self, msg: Msg) -> None:
        try:
            try:
                readiness = await asyncio.wait_for(self.readiness(), ANSWER_WITHIN)
            except TimeoutError:
                readiness = Readiness(
                    False, {"readiness": f"not decided within {ANSWER_WITHIN:g}s"}
                )
            present = Present(
                service=self.service,
                instance=self.instance,
                version=version(),
                started_at=self.started_at,
                ready=readiness.ready,
                checks=readiness.checks,
            )
            await msg.respond(present.encode())
        except Exception:
            log.warning("answering the roll call failed", exc_info=True)


def settled(expected: Collection[str], answered: Collection[str]) -> bool:
    """Whether every expected service has answered (then a short quiet ends the wait)."""
    return set(expected) <= set(answered)


def quiet_enough(settle: float, last_answer_after: float) -> float:
    """How long without a new answer ends the wait once every expected service answered:
    `settle`, or as long as the last answer took to come if that was longer. A loaded
    machine answers slowly (each process runs its readiness checks first), and a service's
    other replicas come later still: a fixed quiet would leave them out of the count."""
    return max(settle, last_answer_after)


async def roll_call(
    nc: NATS,
    expected: Collection[str],
    *,
    deadline: float = DEADLINE,
    settle: float = SETTLE,
) -> list[Present]:
    """Every process that answered within the deadline, by service and instance."""
    answers: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_answer(msg: Msg) -> None:
        answers.put_nowait(msg)

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=on_answer)
    present: dict[tuple[str, str], Present] = {}
    try:
        await nc.publish(subjects.ROLL_CALL, b"", reply=inbox)
        loop = asyncio.get_running_loop()
        asked_at = loop.time()
        end = asked_at + deadline
        last_answer_after = 0.0
        while (left := end - loop.time()) > 0:
            quiet = quiet_enough(settle, last_answer_after)
            wait = min(left, quiet) if settled(expected, {s for s, _ in present}) else left
            try:
                msg = await asyncio.wait_for(answers.get(), wait)
            except TimeoutError:
                if wait < left:
                    break  # settled: every expected service answered, then quiet
                continue
            if (msg.headers or {}).get("Status") == NO_RESPONDERS:
                continue  # the server's word that no one listened when it was asked
            try:
                answer = Present.decode(msg.data)
            except (ValidationError, ValueError) as exc:
                log.warning("an unreadable roll-call answer: %r", exc)
                continue
            present[(answer.service, answer.instance)] = answer
            last_answer_after = loop.time() - asked_at
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return [present[key] for key in sorted(present)]
