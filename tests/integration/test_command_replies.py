"""Commands answered over NATS: each caller gets its own reply, or a timeout."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.msg import Msg

from o_contracts.base import Reply
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope, decode
from o_contracts.ids import new_id
from o_contracts.models import ChatMessage
from o_runtime.commands import REPLY_HEADER, CommandTimeout, encode_reply, send_and_wait
from o_runtime.eventlog import EventLog


def command() -> Envelope[StartRun]:
    agent_id = new_id("agent")
    return Envelope.wrap(
        StartRun(
            run_id=new_id("run"),
            agent_id=agent_id,
            messages=[ChatMessage(id=new_id("message"), role="user", content="hi")],
        ),
        aggregate_id=agent_id,
        producer="test",
    )


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
