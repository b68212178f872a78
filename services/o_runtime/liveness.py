"""Whether a process is still there, asked of NATS itself.

Every service process answers on `o.rpc.alive.<role>.<incarnation>` (subjects.alive_subject)
for as long as its connection to NATS lives; the incarnation is new at every start. A
process that dies (kill -9, a crash, the OOM killer) loses its connection at once: the kernel
closes its socket, nats-server drops its subscriptions, and a request on its subject gets "no
responders" (a 503 status) within a round trip. A process that is alive but stalled (a GC
pause, a starved CPU, SIGSTOP) keeps its connection and its subscription: a request merely
goes unanswered for a while.

So "no responders" proves a death, and silence proves nothing. Takeover acts on the first
only (o_runtime/takeover.py for held commands, o_runtime/sandbox_requests.py for tool calls):
a stalled process never loses its work on this evidence. A stall longer than a consumer's
ack_wait is still redelivered by JetStream, as before (docs/agent-loop.md, recovery).

The one way a live process shows no responders is a connection being re-established (its
nats-server restarted): `checked` asks twice, CONFIRM_AFTER apart, and takeover waits a while
after its own reconnection; docs/agent-loop.md says what a takeover then costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import uuid
import weakref

import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from o_contracts import subjects
from o_runtime.eventlog import EventLog
from o_runtime.nats_flush import FLUSH_WITHIN, flush

# How long a probe waits for an answer (a live process answers in well under a millisecond;
# one that does not is stalled or far away, and counts as alive).
PROBE_TIMEOUT = 0.5
# A death is confirmed by a second "no responders" this much later.
CONFIRM_AFTER = 0.05


class Verdict(enum.Enum):
    ALIVE = "alive"
    GONE = "gone"
    # No answer within the timeout: stalled, or slow to be reached. Not evidence of death.
    SILENT = "silent"


def new_incarnation() -> str:
    """A name for this process's life (a NATS subject token): its pid, and random bits."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


class Liveness:
    """This process's answer to "are you there?" on its NATS connection."""

    def __init__(self, nc: NatsClient, role: str, incarnation: str | None = None) -> None:
        self.nc = nc
        self.incarnation = incarnation or new_incarnation()
        self.subject = subjects.alive_subject(role, self.incarnation)
        self._sub: Subscription | None = None
        self._starting: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._starting is None:
            self._starting = asyncio.create_task(self._subscribe())
        await asyncio.shield(self._starting)

    async def _subscribe(self) -> None:
        self._sub = await self.nc.subscribe(self.subject, cb=self._answer)
        # The server holds the subscription before anyone is told this subject (holdings
        # name it): a probe before that would find no responders and take us for dead.
        await flush(self.nc, FLUSH_WITHIN)

    async def _answer(self, msg: Msg) -> None:
        if msg.reply:
            await msg.respond(b"")

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None


_processes: weakref.WeakKeyDictionary[EventLog, Liveness] = weakref.WeakKeyDictionary()


async def liveness(eventlog: EventLog, incarnation: str | None = None) -> Liveness:
    """This process's liveness on `eventlog`'s connection (one per connection), answering
    from the first call on. `incarnation` names it (the first call decides)."""
    alive = _processes.get(eventlog)
    if alive is None:
        alive = _processes[eventlog] = Liveness(eventlog.nc, eventlog.role, incarnation)
    await alive.start()
    return alive


async def probe(nc: NatsClient, subject: str, timeout: float = PROBE_TIMEOUT) -> Verdict:
    """Ask once whether the process answering on `subject` is there."""
    try:
        await nc.request(subject, b"", timeout=timeout)
    except nats.errors.NoRespondersError:
        return Verdict.GONE
    except nats.errors.TimeoutError:
        return Verdict.SILENT
    return Verdict.ALIVE


async def checked(nc: NatsClient, subject: str, timeout: float = PROBE_TIMEOUT) -> Verdict:
    """Ask whether the process answering on `subject` is there; a death is confirmed by
    asking again."""
    verdict = await probe(nc, subject, timeout)
    if verdict is Verdict.GONE:
        await asyncio.sleep(CONFIRM_AFTER)
        verdict = await probe(nc, subject, timeout)
    return verdict
