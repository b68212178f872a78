"""A share of a command consumer's handlers for one kind of slow work.

Why: a consumer's handlers are few and its commands share them, fast and slow alike. Work
that waits on something slow (a model's answer, an embedding service) can take all of them,
and the fast commands behind it time out: with the model holding twenty memories' ratings,
an edit of a block waited in the memory service's stream until the gateway gave up (504).
Past its share, slow work waits in the stream instead (Deferred, redelivered after a
moment), leaving the other handlers to the rest. The consumer's max_ack_pending must be
well above its handlers' number: JetStream counts a deferred command as pending.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from o_runtime.commands import Deferred

# How long a command past the share waits in the stream before it is delivered again.
DEFER_FOR = 0.5


class HandlerShare:
    def __init__(self, limit: int, delay: float = DEFER_FOR) -> None:
        self.limit = limit
        self.delay = delay
        # Handlers doing this work now.
        self.busy = 0

    @contextmanager
    def taken(self) -> Iterator[None]:
        """One more handler doing this work, or Deferred past the share (before any of
        it is done: call it first)."""
        if self.busy >= self.limit:
            raise Deferred(self.delay)
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1
