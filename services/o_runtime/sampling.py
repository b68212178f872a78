"""Sampling what only the servers know, for the metrics and for readiness.

- A durable consumer's backlog: JetStream's `num_pending` (not yet delivered) and
  `num_ack_pending` (delivered, not acknowledged), per consumer this service runs.
- A projection's lag: the age of the oldest event on its subjects past its checkpoint
  (0 when there is none). Age, not a count of events: "the agents projection is 40 s
  behind" is what an operator (and a readiness threshold) can act on, and the log
  answers it with one direct get per projection (the next event on the projection's
  subjects after its checkpoint, with its time).
- Dead letters kept in O_DEAD_LETTERS, per consumer (sampled by the gateway alone:
  the stream is one for the whole system).

The sampler reads these every `sample_interval` seconds and when `/metrics` is
scraped; instruments.py's gauges report the last reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from o_contracts import subjects
from o_runtime.instruments import Samples

log = logging.getLogger(__name__)

# A sample (and a readiness check) gives up on a server after this long.
SAMPLE_TIMEOUT = 2.0
# A scrape within this long of the last sample reuses it.
FRESH = 1.0


@dataclass(frozen=True)
class Followed:
    """A projection as the sampler sees it: its name and the subjects it reads."""

    name: str
    filter_subject: str


@dataclass(frozen=True)
class ProjectionState:
    name: str
    # The log position it has applied up to (its checkpoint).
    position: int
    # Seconds since the oldest event on its subjects past its checkpoint was appended.
    lag: float


@dataclass(frozen=True)
class Durable:
    """A durable consumer: the stream it reads and its name."""

    stream: str
    name: str


async def projection_states(
    pool: asyncpg.Pool, js: JetStreamContext, projections: Sequence[Followed]
) -> list[ProjectionState]:
    if not projections:
        return []
    rows = await pool.fetch(
        "SELECT projection, last_seq FROM projection_checkpoints WHERE projection = ANY($1)",
        [p.name for p in projections],
    )
    at = {row["projection"]: int(row["last_seq"]) for row in rows}
    now = datetime.now(UTC)
    states = []
    for projection in projections:
        position = at.get(projection.name, 0)
        try:
            oldest = await js.get_msg(
                subjects.EVENTS_STREAM,
                seq=position + 1,
                subject=projection.filter_subject,
                next=True,
                direct=True,
            )
        except NotFoundError:
            lag = 0.0  # nothing past the checkpoint
        else:
            appended = oldest.time or now
            lag = max(0.0, (now - appended).total_seconds())
        states.append(ProjectionState(projection.name, position, lag))
    return states


class Sampler:
    def __init__(
        self,
        js: JetStreamContext,
        pool: asyncpg.Pool | None,
        samples: Samples,
        *,
        durables: Sequence[Durable] = (),
        projections: Sequence[Followed] = (),
        dead_letters: bool = False,
        interval: float = 10.0,
    ) -> None:
        self.js = js
        self.pool = pool
        self.samples = samples
        self.durables = list(durables)
        self.projections = list(projections)
        self.dead_letters = dead_letters
        self.interval = interval
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._sampled_at = float("-inf")

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="metrics sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval)

    async def refresh(self, fresh: float = 0.0) -> None:
        """Sample again, unless a sample younger than `fresh` seconds exists. A server
        that does not answer keeps its last readings (and is said once in the log)."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            if loop.time() - self._sampled_at < fresh:
                return
            try:
                async with asyncio.timeout(SAMPLE_TIMEOUT):
                    await self._sample()
            except Exception as exc:
                log.debug("sampling for metrics failed: %r", exc)
            self._sampled_at = loop.time()

    async def _sample(self) -> None:
        for durable in self.durables:
            try:
                info = await self.js.consumer_info(durable.stream, durable.name)
            except NotFoundError:
                continue
            self.samples.queue_pending[durable.name] = int(info.num_pending or 0)
            self.samples.queue_ack_pending[durable.name] = int(info.num_ack_pending or 0)
        if self.pool is not None:
            for state in await projection_states(self.pool, self.js, self.projections):
                self.samples.projection_lag[state.name] = state.lag
        if self.dead_letters:
            info = await self.js.stream_info(
                subjects.DEAD_LETTER_STREAM, subjects_filter=subjects.ALL_DEAD_LETTERS
            )
            prefix = subjects.DEAD_LETTER_PREFIX + "."
            kept = {
                subject.removeprefix(prefix): int(count)
                for subject, count in (info.state.subjects or {}).items()
            }
            # A consumer whose dead letters all aged out reads 0, not its last count.
            for consumer in self.samples.dead_letters_stored:
                kept.setdefault(consumer, 0)
            self.samples.dead_letters_stored.clear()
            self.samples.dead_letters_stored.update(kept)
