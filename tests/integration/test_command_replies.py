"""Commands answered over NATS: each caller gets its own reply, or a timeout."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.msg import Msg

from o_contracts import subjects
from o_contracts.base import Reply
from o_contracts.envelope import Envelope, decode
from o_runtime import commands as commands_module
from o_runtime import retries as retries_module
from o_runtime.commands import (
    REPLY_HEADER,
    CommandTimeout,
    Delivery,
    decode_reply,
    encode_reply,
    send_and_wait,
)
from o_runtime.eventlog import AppendRejected, EventLog
from tests.integration.commands_support import command, consuming, subject_of


async def test_concurrent_callers_each_get_their_own_reply(eventlog: EventLog) -> None:
    received: list[Msg] = []

    async def answer(msg: Msg) -> None:
        # Once all have come, answer them last first: replies arrive out of order.
        received.append(msg)
        if len(received) < len(commands):
            return
        for m in reversed(received):
            envelope = decode(m.data)
            reply = Reply(ok=True, result={"run_id": envelope.data.run_id})
            await eventlog.nc.publish((m.headers or {})[REPLY_HEADER], encode_reply(reply))

    commands = [command() for _ in range(5)]
    # (a subject of the commands stream that no service consumes: this test answers)
    responder = await eventlog.nc.subscribe("o.cmd.nobody.*", cb=answer)
    try:
        replies = await asyncio.gather(
            *(
                send_and_wait(eventlog, f"o.cmd.nobody.{c.aggregate_id}", c, timeout=30)
                for c in commands
            )
        )
    finally:
        await responder.unsubscribe()
    assert [r.result["run_id"] for r in replies if r.result] == [c.data.run_id for c in commands]


async def test_an_unanswered_command_times_out(eventlog: EventLog) -> None:
    c = command()
    with pytest.raises(CommandTimeout):
        # (a subject of the commands stream that no service consumes)
        await send_and_wait(eventlog, f"o.cmd.nobody.{c.aggregate_id}", c, timeout=0.3)


async def test_a_command_that_meets_an_outage_is_retried_never_dead_lettered(
    eventlog: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retries_module, "OUTAGE_FIRST", 0.01)
    monkeypatch.setattr(retries_module, "OUTAGE_LONGEST", 0.02)
    deliveries = 0

    async def handler(envelope: Envelope[Any], delivery: Delivery) -> Reply:
        nonlocal deliveries
        deliveries += 1
        if deliveries <= commands_module.MAX_DELIVERIES + 2:
            raise ConnectionRefusedError("Postgres is restarting")
        return Reply(ok=True, result={"deliveries": deliveries})

    c = command()
    async with consuming(eventlog, "outage", handler) as consumer:
        reply = await send_and_wait(eventlog, subject_of(consumer, c), c, timeout=30)
    assert reply.ok and reply.result == {"deliveries": commands_module.MAX_DELIVERIES + 3}
    dead = await eventlog.js.stream_info(subjects.DEAD_LETTER_STREAM)
    assert subjects.dead_letter_subject(consumer.name) not in (
        (dead.state.subjects or {}) if dead.state else {}
    )


async def test_a_command_whose_handler_died_is_sent_again_and_answered(
    eventlog: EventLog,
) -> None:
    # The first delivery's handler "dies" (never answers, never acks); a caller
    # that resends gets its answer from the next delivery instead of waiting for
    # the consumer's ack_wait.
    seen: list[str] = []

    async def handler(envelope: Envelope[Any], delivery: Delivery) -> Reply:
        seen.append(envelope.id)
        if len(seen) == 1:
            await asyncio.Event().wait()  # stuck until the consumer stops
        return Reply(ok=True, result={"copies": len(seen)})

    c = command()
    async with consuming(eventlog, "resend", handler, ack_wait=60) as consumer:
        reply = await send_and_wait(
            eventlog, subject_of(consumer, c), c, timeout=10, resend_every=0.3
        )
    assert reply.ok and reply.result == {"copies": 2}
    assert seen == [c.id, c.id]


async def test_a_refusal_whose_ack_was_lost_is_answered_again_not_decided_again(
    eventlog: EventLog,
) -> None:
    # Refused (nothing changed), then acknowledged: an ack lost on the way (NATS restarting)
    # has JetStream deliver the command again. Decided afresh, it went through on what had
    # changed meanwhile, though its sender was told it was refused. Now its refusal is kept
    # (o_runtime/refusals.py) and the redelivery is answered with it.
    decided: list[int] = []

    async def handler(envelope: Envelope[Any], delivery: Delivery) -> Reply:
        decided.append(delivery.num_delivered)
        if len(decided) == 1:
            raise AppendRejected("block human is over its limit", 422)
        return Reply(ok=True, result={"made": True})

    c = command()
    acks = 0
    inbox = eventlog.nc.new_inbox()
    replies = await eventlog.nc.subscribe(inbox)
    try:
        async with consuming(eventlog, "refused", handler, ack_wait=1) as consumer:
            acking = consumer._ack

            async def ack_lost_once(msg: Msg) -> None:
                nonlocal acks
                acks += 1
                if acks == 1:
                    consumer.holdings.release(msg.reply)  # (never reaches the server)
                    return
                await acking(msg)

            consumer._ack = ack_lost_once  # type: ignore[method-assign]
            await eventlog.send_command(subject_of(consumer, c), c, reply_to=inbox)
            answers = [decode_reply((await replies.next_msg(timeout=30)).data) for _ in "ab"]
    finally:
        await replies.unsubscribe()
    assert [(a.ok, a.status, a.error) for a in answers] == [
        (False, 422, "block human is over its limit")
    ] * 2
    assert decided == [1]  # the redelivery was not decided again
    assert acks == 2
