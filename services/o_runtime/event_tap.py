"""Events a projector of this process receives, also offered to listeners in the process.

A run listens to its conversation's subject while it runs: a cancellation (or an interrupt,
or a request to steer it) published during a model call stops or changes the run before the
call returns. It used to subscribe on core NATS for that, and so had every event of its own
run delivered to it a second time: three deliveries a 1-step run, in the process the run's
path goes through (and three TLS records to decrypt when NATS runs with TLS).

The executor's runs projection already follows every agent's and conversation's events in
that process. While it does (it holds the projection's lock: o_runtime/projector.py), the
events it receives are handed to the listeners of their subject as they arrive, before they
are applied, and a listener needs no subscription of its own. A process that does not follow
the projection (a standby replica), or stops following it (its Postgres session or NATS
connection was lost), gives each listener a core NATS subscription instead, as before; so
does a projector far behind the log (catching up after an outage), which would hand a run
its cancellation only once it got there.

What is heard is a hint, never the decision: the log is (the run's next append sees every
event since its last: o_executor/live/recorder.py). A listener may hear an event twice (its
subscription and the projector both, around a change, or the projector following again from
its checkpoint) or late (the projector behind): what listeners do with it is idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = logging.getLogger(__name__)

Listener = Callable[[Msg], None]

# Events still to come after the one the projector received, past which it is too far
# behind to be heard through: listeners subscribe until it has caught up.
BEHIND = 100


@dataclass(eq=False)
class _Listening:
    subject: str
    listener: Listener
    # Its own core NATS subscription, while the tap cannot hear for it.
    subscription: Subscription | None = None
    subscribing: asyncio.Task[None] | None = field(default=None, repr=False)


class EventTap:
    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self._by_subject: dict[str, list[_Listening]] = {}
        # Whether a projector of this process follows the subjects listened to, and whether
        # it was last seen far behind the log.
        self._following = False
        self._behind = False

    @property
    def following(self) -> bool:
        """Whether listeners hear through the projector (it follows, and is not behind)."""
        return self._following and not self._behind

    @property
    def subscriptions(self) -> int:
        """How many listeners hear through a subscription of their own."""
        return sum(
            1 for ls in self._by_subject.values() for listening in ls if listening.subscription
        )

    def heard(self, msg: Msg) -> None:
        """An event the projector received (called before it is applied)."""
        behind = msg.metadata.num_pending > BEHIND
        if behind != self._behind:
            self._behind = behind
            if behind:
                self._subscribe_all()
        for listening in self._by_subject.get(msg.subject, ()):
            _offer(listening.listener, msg)

    def follow(self, following: bool) -> None:
        """The projector started (True) or stopped (False) following the log."""
        self._following = following
        self._behind = False
        if not following:
            self._subscribe_all()

    def _subscribe_all(self) -> None:
        # (Listeners keep these to their end: hearing an event twice is harmless.)
        for listenings in self._by_subject.values():
            for listening in listenings:
                self._subscribe_later(listening)

    @contextlib.asynccontextmanager
    async def listening(self, subject: str, listener: Listener) -> AsyncIterator[None]:
        """Hand `listener` the events published on `subject` until the block ends."""
        listening = _Listening(subject, listener)
        self._by_subject.setdefault(subject, []).append(listening)
        try:
            if not self.following:
                await self._subscribe(listening)
            yield
        finally:
            listenings = self._by_subject.get(subject, [])
            with contextlib.suppress(ValueError):
                listenings.remove(listening)
            if not listenings:
                self._by_subject.pop(subject, None)
            if listening.subscribing is not None:  # (a subscription on its way is undone)
                with contextlib.suppress(Exception):
                    await listening.subscribing
            if listening.subscription is not None:
                with contextlib.suppress(Exception):
                    await listening.subscription.unsubscribe()

    def _subscribe_later(self, listening: _Listening) -> None:
        if listening.subscription is None and listening.subscribing is None:
            listening.subscribing = asyncio.create_task(self._subscribe(listening))

    async def _subscribe(self, listening: _Listening) -> None:
        async def on_msg(msg: Msg) -> None:
            _offer(listening.listener, msg)

        try:
            listening.subscription = await self.nc.subscribe(listening.subject, cb=on_msg)
        except Exception as exc:  # (a closed connection: the run's appends fail on their own)
            log.warning("event tap: cannot subscribe to %s: %r", listening.subject, exc)
        finally:
            listening.subscribing = None


def _offer(listener: Listener, msg: Msg) -> None:
    try:
        listener(msg)
    except Exception:
        log.exception("event tap: a listener failed on %s", msg.subject)
