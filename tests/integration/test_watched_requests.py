"""A completion asked of the executors is asked again when the one that took it dies, waited
for while it lives, and fails at once when none runs (o_runtime/watched_requests.py,
o_runtime/watched_answers.py). Real NATS with O's identities: the memory role asks, the
executor role answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import nats.errors
import pytest
from nats.aio.msg import Msg

from o_contracts import subjects
from o_runtime.eventlog import EventLog
from o_runtime.liveness import Liveness
from o_runtime.nats_identity import Identity
from o_runtime.watched_answers import WatchedAnswers
from o_runtime.watched_requests import MAX_ASKS, AnswererLost, request_watched
from tests.integration.sandbox_support import sandbox_nats, seed_file  # noqa: F401

DEADLINE = 20.0


async def connect(nats_url: str, role: str, name: str) -> EventLog:
    identity = Identity.from_file(role, seed_file(nats_url, role))
    return await EventLog.connect(nats_url, name=name, identity=identity)


class Replica:
    """An executor's generate requests and liveness, on a connection of its own."""

    def __init__(self, log: EventLog, answer: Callable[[bytes], Awaitable[bytes]]) -> None:
        self.log = log
        self.alive = Liveness(log.nc, "executor")
        self.requests = WatchedAnswers(
            log.nc, subjects.EXECUTOR_GENERATE, "executor", self.alive.incarnation, answer, 4
        )

    async def start(self) -> Replica:
        await self.alive.start()
        await self.requests.start()
        return self

    async def stop(self) -> None:
        await self.requests.stop()
        await self.log.close()

    async def die(self) -> None:
        # (to nats-server, a closed connection is a dead process: its subscriptions go)
        await self.log.nc.close()


@pytest.fixture
async def asker(sandbox_nats: str) -> AsyncIterator[EventLog]:  # noqa: F811
    log = await connect(sandbox_nats, "memory", "test-memory")
    yield log
    await log.close()


def answering(text: bytes, asked: list[bytes]) -> Callable[[bytes], Awaitable[bytes]]:
    async def answer(body: bytes) -> bytes:
        asked.append(body)
        return text

    return answer


def holding(asked: list[bytes], got: asyncio.Event) -> Callable[[bytes], Awaitable[bytes]]:
    async def answer(body: bytes) -> bytes:
        asked.append(body)
        got.set()
        await asyncio.Event().wait()  # for ever: a model that never answers
        return b""

    return answer


async def ask(asker: EventLog, timeout: float = DEADLINE, max_asks: int = MAX_ASKS) -> bytes:
    msg = await request_watched(
        asker.nc,
        subjects.EXECUTOR_GENERATE,
        b"question",
        role="executor",
        timeout=timeout,
        max_asks=max_asks,
    )
    return bytes(msg.data)


async def one_dies_holding(
    nats_url: str, asker: EventLog, max_asks: int = MAX_ASKS
) -> tuple[Replica, asyncio.Task[bytes], list[bytes], list[bytes]]:
    """As one_holding_then_another (60 s to answer), and the replica holding the question
    dies: the other replica, the question being asked, and what each was asked."""
    first, second, asking, held, other = await one_holding_then_another(
        nats_url, asker, timeout=60, max_asks=max_asks
    )
    try:
        await first.die()
    except BaseException:
        await second.stop()
        raise
    return second, asking, held, other


async def reaches_an_answerer(asker: EventLog) -> None:
    """Until a plain request of the asker's is answered. (Once, in CI, the subscription just
    flushed by the answerer's connection was not yet there for the asker's request: "no
    responders". Only that is asked again; anything else fails the test.)"""
    async with asyncio.timeout(DEADLINE):
        while True:
            try:
                await asker.nc.request(subjects.EXECUTOR_GENERATE, b"are you there", DEADLINE)
                return
            except nats.errors.NoRespondersError:
                await asyncio.sleep(0.05)  # (between two looks)


async def one_holding_then_another(
    nats_url: str, asker: EventLog, timeout: float, max_asks: int = MAX_ASKS
) -> tuple[Replica, Replica, asyncio.Task[bytes], list[bytes], list[bytes]]:
    """A replica takes the question and holds it; then another replica starts, which would
    answer at once. The two, the question being asked, and what each was asked."""
    held: list[bytes] = []
    got = asyncio.Event()
    first = await Replica(await connect(nats_url, "executor", "a"), holding(held, got)).start()
    asking = asyncio.create_task(ask(asker, timeout=timeout, max_asks=max_asks))
    await asyncio.wait_for(got.wait(), DEADLINE)
    other: list[bytes] = []
    second = await Replica(
        await connect(nats_url, "executor", "b"), answering(b"answer", other)
    ).start()
    return first, second, asking, held, other


async def test_the_replica_that_took_it_dies_and_another_answers(
    sandbox_nats: str,  # noqa: F811
    asker: EventLog,
) -> None:
    second, asking, held, other = await one_dies_holding(sandbox_nats, asker)
    try:
        assert await asyncio.wait_for(asking, DEADLINE) == b"answer"
        assert (held, other) == ([b"question"], [b"question"])
    finally:
        await second.stop()


async def test_a_request_asked_once_fails_when_its_replica_dies_and_is_not_asked_again(
    sandbox_nats: str,  # noqa: F811
    asker: EventLog,
) -> None:
    second, asking, held, other = await one_dies_holding(sandbox_nats, asker, max_asks=1)
    try:
        with pytest.raises(AnswererLost):
            await asyncio.wait_for(asking, DEADLINE)
        assert (held, other) == ([b"question"], [])
    finally:
        await second.stop()


async def test_a_replica_that_lives_is_waited_for_and_not_asked_around(
    sandbox_nats: str,  # noqa: F811
    asker: EventLog,
) -> None:
    first, second, asking, held, other = await one_holding_then_another(
        sandbox_nats, asker, timeout=3
    )
    try:
        # Slow is not dead: the request's own timeout ends it, and no one else was asked.
        with pytest.raises(nats.errors.TimeoutError):
            await asking
        assert (held, other) == ([b"question"], [])
    finally:
        for replica in (first, second):
            await replica.stop()


async def test_an_answerer_that_does_not_say_it_took_it_is_still_heard(
    sandbox_nats: str,  # noqa: F811
    asker: EventLog,
) -> None:
    # (one from before the contract: a plain answer, once)
    log = await connect(sandbox_nats, "executor", "plain")

    async def respond(msg: Msg) -> None:
        await msg.respond(b"plain answer")

    sub = await log.nc.subscribe(subjects.EXECUTOR_GENERATE, queue="executor", cb=respond)
    await log.nc.flush()  # (on the server before the question is asked)
    try:
        await reaches_an_answerer(asker)
        assert await ask(asker) == b"plain answer"
    finally:
        await sub.unsubscribe()
        await log.close()


async def test_with_no_executor_running_it_fails_at_once(asker: EventLog) -> None:
    with pytest.raises(nats.errors.NoRespondersError):
        await ask(asker)
