"""Answering requests whose askers watch the answerer (o_runtime/watched_requests.py): a
completion asked of the executor (`o.rpc.executor.generate`), a search asked of the memory
service (`o.rpc.memory.search_archival`, `.search_files`).

A core NATS request dies with the process that took it. So this process says at once that
it took a request whose asker wants to know (`WANTS_TAKER`: o_contracts/requests.py), naming
its incarnation, before the request waits for a worker: the asker then watches this
process's liveness subject and asks another replica if it dies.

A plain NATS subscription rather than a FastStream subscriber: the first answer must go out
when the request arrives, not when a worker is free to handle it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from o_contracts.requests import TAKEN_BY, WANTS_TAKER
from o_runtime.nats_flush import FLUSH_WITHIN, flush
from o_runtime.tracing import continued

log = logging.getLogger(__name__)


class WatchedAnswers:
    """Takes requests on `subject` (in `queue`, shared with fellow replicas) for `answer`,
    `workers` at a time, on `nc`: the connection that answers on `incarnation`'s liveness
    subject, so the two go together."""

    def __init__(
        self,
        nc: NatsClient,
        subject: str,
        queue: str,
        incarnation: str,
        answer: Callable[[bytes], Awaitable[bytes]],
        workers: int,
    ) -> None:
        self.nc = nc
        self.subject = subject
        self.queue = queue
        self.incarnation = incarnation
        self.answer = answer
        self.workers = asyncio.Semaphore(workers)
        self._sub: Subscription | None = None
        self._answering: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(self.subject, queue=self.queue, cb=self._on_request)
        # Started means heard: the subscription on the server before this returns (a request
        # right after, on another connection, would find no responders otherwise). With NATS
        # away, nats-py subscribes again on reconnecting.
        with contextlib.suppress(TimeoutError):
            await flush(self.nc, FLUSH_WITHIN)

    async def _on_request(self, msg: Msg) -> None:
        if not msg.reply:
            return  # no one to answer
        if (msg.headers or {}).get(WANTS_TAKER) is not None:
            with contextlib.suppress(Exception):
                await self.nc.publish(msg.reply, b"", headers={TAKEN_BY: self.incarnation})
        task = asyncio.create_task(self._answer(msg))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _answer(self, msg: Msg) -> None:
        try:
            async with self.workers:
                with continued(f"{self.queue} {self.subject}", msg.headers):
                    answer = await self.answer(msg.data)
            await self.nc.publish(msg.reply, answer)
        except Exception:
            log.exception("a request on %s failed", self.subject)

    async def stop(self) -> None:
        """Takes no more; those in hand are dropped (their askers see this process go and
        ask again)."""
        sub, self._sub = self._sub, None
        await stop_answering(sub, self._answering)


async def stop_answering(sub: Subscription | None, answering: set[asyncio.Task[None]]) -> None:
    """Unsubscribe (if subscribed), and cancel the answers still being made."""
    if sub is not None:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    for task in list(answering):
        task.cancel()
    await asyncio.gather(*answering, return_exceptions=True)
