"""A command to send in the command-consumer tests (test_command_replies.py, test_takeover.py),
and a consumer of its own for a test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from o_contracts import subjects
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.ids import new_id
from o_contracts.models import ChatMessage
from o_runtime.commands import CommandConsumer, CommandHandler
from o_runtime.eventlog import EventLog


def command(agent_id: str | None = None) -> Envelope[StartRun]:
    """A StartRun of `agent_id`, or of a fresh agent (its own subject, so tests never meet)."""
    agent_id = agent_id or new_id("agent")
    return Envelope.wrap(
        StartRun(
            run_id=new_id("run"),
            agent_id=agent_id,
            messages=[ChatMessage(id=new_id("message"), role="user", content="hi")],
        ),
        aggregate_id=agent_id,
        producer="test",
    )


@asynccontextmanager
async def consuming(
    eventlog: EventLog, kind: str, handler: CommandHandler, **options: Any
) -> AsyncIterator[CommandConsumer]:
    """A started consumer of StartRun on subjects of its own (`o.cmd.<name>.>`: send to
    `subject_of(consumer, command)`), stopped and deleted on exit."""
    name = f"{kind}_{uuid.uuid4().hex[:8]}"
    consumer = CommandConsumer(eventlog, name, f"o.cmd.{name}.>", {StartRun: handler}, **options)
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()
        await eventlog.js.delete_consumer(subjects.COMMANDS_STREAM, name)


def subject_of(consumer: CommandConsumer, envelope: Envelope[Any]) -> str:
    return f"o.cmd.{consumer.name}.{envelope.aggregate_id}"
