"""A run's answer handed from the runs projection's commit of its end to the run's reply
(o_executor/run_answers.py): for a run a reply in the process awaits, what the projection
returns is what the gateway would read back once it committed, and it survives the reply's
MessagePack as it was. Real JetStream and Postgres, the executor's runs projection."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import msgpack

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.events import LLMResponded, RunCompleted, RunStarted, ToolReturned
from o_contracts.ids import new_id
from o_contracts.models import ChatMessage, ToolCall, Usage
from o_executor import run_answers
from o_executor.projections import runs
from o_executor.run_answers import RUN_AND_MESSAGES, AnswerRow, packed, rows_of, unpacked
from o_runtime.eventlog import EventLog
from o_runtime.projector import Outcome, Projector
from tests.integration.conftest import renamed


def two_steps(agent_id: str, run_id: str) -> list[Any]:
    """A run that called a tool, read its result and answered (the answer in its end)."""
    usage = Usage(prompt_tokens=12, completion_tokens=3, total_tokens=15)

    def responded(step: int, message: ChatMessage) -> LLMResponded:
        return LLMResponded(
            run_id=run_id,
            agent_id=agent_id,
            step_id=f"step-{step}-{run_id}",
            step_number=step,
            message=message,
            usage=usage,
            model="openai/gpt-4o-mini",
            finish_reason="stop",
        )

    call = ToolCall(id="call-1", name="roll_die", arguments='{"sides": 6}')
    asked = ChatMessage(id=f"message-call-{run_id}", role="assistant", tool_calls=[call])
    result = ChatMessage(
        id=f"message-result-{run_id}", role="tool", tool_call_id="call-1", content="4"
    )
    answer = ChatMessage(id=f"message-answer-{run_id}", role="assistant", content="You got 4.")
    end = RunCompleted(
        run_id=run_id,
        agent_id=agent_id,
        stop_reason="end_turn",
        usage=Usage(prompt_tokens=24, completion_tokens=6, total_tokens=30),
        step_count=2,
        answer=responded(1, answer),
    )
    return [
        RunStarted(
            run_id=run_id,
            agent_id=agent_id,
            messages=[ChatMessage(id=f"message-in-{run_id}", role="user", content="roll")],
            max_steps=10,
        ),
        responded(0, asked),
        ToolReturned(run_id=run_id, agent_id=agent_id, step_id=f"step-0-{run_id}", message=result),
        end,
    ]


async def project(
    log: EventLog, projector: Projector, agent_id: str, run_id: str, events: slice = slice(None)
) -> None:
    subject = subjects.agent_subject(agent_id)
    for event in two_steps(agent_id, run_id)[events]:
        appended = await log.append(
            subject, Envelope.wrap(event, aggregate_id=agent_id, producer="test")
        )
        msg = await log.js.get_msg(subjects.EVENTS_STREAM, appended.seq)
        assert await projector.apply(appended.seq, subject, msg.data or b"") is Outcome.APPLIED


async def read_back(pool: asyncpg.Pool, run_id: str) -> list[AnswerRow]:
    return rows_of(await pool.fetch(RUN_AND_MESSAGES, run_id, None))


def meaning(rows: list[AnswerRow] | None) -> list[tuple[Any, ...]]:
    """The rows with each body as the JSON it is (its text is Postgres' jsonb rendering or
    json.dumps': the gateway parses it)."""
    assert rows is not None
    return [
        (
            r.stop_reason,
            r.usage,
            r.step_count,
            r.conversation_id,
            json.loads(r.body or "null"),
            r.created_at,
            r.step_id,
        )
        for r in rows
    ]


async def awaited_run(log: EventLog, pool: asyncpg.Pool) -> tuple[str, list[AnswerRow] | None]:
    """A new run projected while a reply in this process awaits it: its id, what it handed."""
    projector = Projector(renamed(runs), pool, log)
    agent_id, run_id = new_id("agent"), new_id("run")
    with run_answers.awaited.awaiting(run_id):
        await project(log, projector, agent_id, run_id)
        return run_id, run_answers.awaited.take(run_id)


async def test_the_end_of_an_awaited_run_returns_what_reading_it_back_returns(
    eventlog: EventLog, pool: asyncpg.Pool
) -> None:
    run_id, handed = await awaited_run(eventlog, pool)

    assert handed is not None
    assert meaning(handed) == meaning(await read_back(pool, run_id))
    # The user's message aside, every message of the run, in log order, with the run's end.
    assert [r.step_id for r in handed] == [
        f"step-0-{run_id}",
        f"step-0-{run_id}",
        f"step-1-{run_id}",
    ]
    assert all(r.stop_reason == "end_turn" and r.step_count == 2 for r in handed)
    assert handed[0].usage is not None and handed[0].usage["total_tokens"] == 30


async def test_the_answer_a_reply_carries_is_the_rows_read_back(
    eventlog: EventLog, pool: asyncpg.Pool
) -> None:
    run_id, handed = await awaited_run(eventlog, pool)
    assert handed is not None

    over_the_wire = msgpack.unpackb(msgpack.packb(packed(handed)), raw=False)

    assert meaning(unpacked(over_the_wire)) == meaning(await read_back(pool, run_id))


async def test_a_run_nobody_here_awaits_hands_nothing(
    eventlog: EventLog, pool: asyncpg.Pool
) -> None:
    projector = Projector(renamed(runs), pool, eventlog)
    agent_id, run_id = new_id("agent"), new_id("run")
    await project(eventlog, projector, agent_id, run_id)

    assert run_answers.awaited.take(run_id) is None
    assert len(await read_back(pool, run_id)) == 3


async def test_a_run_resumed_after_its_start_was_projected_hands_nothing(
    eventlog: EventLog, pool: asyncpg.Pool
) -> None:
    """Its first messages were written before this process awaited it (a run taken up
    after its executor died): the gateway reads the answer back."""
    projector = Projector(renamed(runs), pool, eventlog)
    agent_id, run_id = new_id("agent"), new_id("run")
    await project(eventlog, projector, agent_id, run_id, slice(0, 2))
    with run_answers.awaited.awaiting(run_id):
        await project(eventlog, projector, agent_id, run_id, slice(2, None))
        handed = run_answers.awaited.take(run_id)

    assert handed is None
    assert len(await read_back(pool, run_id)) == 3


def test_a_reply_carries_no_answer_past_its_limit_and_a_bad_one_is_ignored() -> None:
    row = AnswerRow("end_turn", {}, 1, None, "x" * (run_answers.RESPONSE_LIMIT + 1), None, None)
    assert packed([row]) is None
    assert packed([]) is None
    for bad in (None, "text", {"stop_reason": "end_turn"}, {"messages": [{"body": 1}]}):
        assert unpacked(bad) is None
