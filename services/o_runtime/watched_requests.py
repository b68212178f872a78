"""A long request (a model's completion) whose answerer is watched while the asker waits.

A core NATS request is not redelivered: when the process that took it dies (killed, OOM, a
node lost), the asker hears nothing and waits out its whole timeout, holding whatever waits
on the answer (a memory service's command, for a memory's judgement: o_memory/model_calls.py).
So the answerer says first who took the request (`TAKEN_BY`, its incarnation), and the asker
asks that process's liveness subject every PROBE_EVERY while it waits (o_runtime/liveness.py):
"no responders" there is a death, and the request is asked again, for another replica to
take. Silence is not: a stalled answerer is waited for, up to the request's timeout.

A request nobody says they took within LOST_AFTER (its taker died before it could say, or an
answerer from before this contract) is asked again too. Every ask shares one inbox, so the
first answer to any of them is the answer. Only for requests that are safe to answer twice:
nothing is recorded (a completion outside a run).

The decisions are `Watch`'s; `request_watched` does the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from o_contracts import subjects
from o_contracts.requests import TAKEN_BY, WANTS_TAKER
from o_runtime.liveness import Verdict, checked
from o_runtime.tracing import inject

# How often the asker asks whether the process that took its request lives.
PROBE_EVERY = 1.0
# A request no one said they took within this long is asked again.
LOST_AFTER = 5.0
# Asks of one request in all (the first included).
MAX_ASKS = 3
# After a taker died, how long "no responders" (no replica running yet: the dead one is
# being restarted) is asked again, every NO_ONE_PAUSE, before the request fails as such.
NO_ONE_FOR = 10.0
NO_ONE_PAUSE = 0.5
NO_RESPONDERS = "503"


class AnswererLost(nats.errors.TimeoutError):
    """Every process that took the request died, and it is not asked again (its asks
    spent: one only, for a request not safe to answer twice). A TimeoutError to callers that
    do not tell the two apart."""


class Step(enum.Enum):
    WAIT = "wait"
    ASK = "ask"
    GIVE_UP = "give up"


@dataclass
class Watch:
    """What the asker knows of its request, and what it does next."""

    lost_after: float = LOST_AFTER
    max_asks: int = MAX_ASKS
    asks: int = 0
    asked_at: float = 0.0
    # Processes that said they took an ask and were not seen to die.
    takers: set[str] = field(default_factory=set)
    deaths: int = 0
    # A taker died since the last ask.
    died_since_ask: bool = False
    no_one_for: float = NO_ONE_FOR
    # Since when asks after a death found no replica.
    no_one_since: float | None = None

    def asked(self, now: float) -> None:
        self.asks += 1
        self.asked_at = now
        self.died_since_ask = False

    def took(self, taker: str) -> None:
        self.takers.add(taker)
        self.no_one_since = None

    def died(self, taker: str) -> None:
        if taker in self.takers:
            self.takers.discard(taker)
            self.deaths += 1
            self.died_since_ask = True

    def next_step(self, now: float) -> Step:
        if self.takers:
            return Step.WAIT  # someone alive holds it (or is stalled: silence proves nothing)
        if not self.died_since_ask and now - self.asked_at < self.lost_after:
            return Step.WAIT  # the last ask may still be taken
        if self.asks < self.max_asks:
            return Step.ASK
        # Every ask's taker died: no answer is coming. Otherwise an ask no one said they
        # took (an older answerer, or a stalled one) may still be answered in time.
        return Step.GIVE_UP if self.deaths >= self.asks else Step.WAIT

    def no_one(self, now: float) -> bool:
        """ "No responders" to the last ask (no replica subscribed): whether to ask again,
        after NO_ONE_PAUSE, rather than fail. Only after a death (its replica may be being
        restarted), for NO_ONE_FOR at most; such an ask does not count as one."""
        if self.deaths == 0:
            return False
        if self.no_one_since is None:
            self.no_one_since = now
        if now - self.no_one_since >= self.no_one_for:
            return False
        self.asks -= 1
        return True


async def request_watched(
    nc: NatsClient,
    subject: str,
    payload: bytes,
    *,
    role: str,
    timeout: float,
    headers: Mapping[str, str] | None = None,
    max_asks: int = MAX_ASKS,
) -> Msg:
    """The answer to a request on `subject` that processes of `role` answer, asked again
    (up to `max_asks` in all; 1: never) if the one that took it dies. Raises as
    `nc.request` does: nats' NoRespondersError (none runs), TimeoutError (no answer within
    `timeout`), or AnswererLost, a TimeoutError (every ask's taker died)."""
    loop = asyncio.get_running_loop()
    answers: asyncio.Queue[Msg] = asyncio.Queue()
    inbox = await nc.subscribe(nc.new_inbox(), cb=answers.put)
    watch = Watch(max_asks=max_asks)
    sent = {**(headers or {}), WANTS_TAKER: "1"}

    async def ask() -> None:
        watch.asked(loop.time())
        await nc.publish(subject, payload, reply=inbox.subject, headers=inject(dict(sent)))

    try:
        async with asyncio.timeout(timeout):
            await ask()
            probed = loop.time()
            while True:
                msg = await _next(answers, PROBE_EVERY)
                if msg is not None:
                    status = (msg.headers or {}).get("Status")
                    taker = (msg.headers or {}).get(TAKEN_BY)
                    if status == NO_RESPONDERS:
                        if not watch.no_one(loop.time()):
                            raise nats.errors.NoRespondersError
                        await asyncio.sleep(NO_ONE_PAUSE)
                        await ask()
                        continue
                    if taker is None:
                        return msg  # the answer
                    watch.took(taker)
                if loop.time() - probed >= PROBE_EVERY:
                    probed = loop.time()
                    for taker in list(watch.takers):
                        alive = subjects.alive_subject(role, taker)
                        if await checked(nc, alive) is Verdict.GONE:
                            watch.died(taker)
                step = watch.next_step(loop.time())
                if step is Step.ASK:
                    await ask()
                elif step is Step.GIVE_UP:
                    raise AnswererLost
    except AnswererLost:
        raise
    except TimeoutError as exc:
        # (asyncio's timeout and nats' own, one exception for the caller)
        raise nats.errors.TimeoutError from exc
    finally:
        with contextlib.suppress(Exception):
            await inbox.unsubscribe()


async def _next(answers: asyncio.Queue[Msg], within: float) -> Msg | None:
    try:
        return await asyncio.wait_for(answers.get(), within)
    except TimeoutError:
        return None
