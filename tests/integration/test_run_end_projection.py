"""A run's last answer recorded in its RunCompleted projects as its own LLMResponded did:
the log holds runs of both shapes (every run before answers rode with the run's end), and
a rebuild reads them alike. Real JetStream and Postgres, the executor's runs projection."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.events import LLMResponded, RunCompleted, RunStarted
from o_contracts.ids import new_id
from o_contracts.models import ChatMessage, Usage
from o_executor.projections import runs
from o_runtime.eventlog import EventLog
from o_runtime.projector import Outcome, Projector
from tests.integration.conftest import renamed


def shapes(agent_id: str, run_id: str, merged: bool) -> list[Any]:
    """A 1-step run's events: its answer alone then its end, or its end carrying it."""
    answer = LLMResponded(
        run_id=run_id,
        agent_id=agent_id,
        step_id=f"step-{run_id}",
        step_number=0,
        message=ChatMessage(id=f"message-{run_id}", role="assistant", content="Hello!"),
        usage=Usage(prompt_tokens=12, completion_tokens=3, total_tokens=15),
        model="openai/gpt-4o-mini",
        finish_reason="stop",
        llm_request_ns=1_000,
    )
    usage = Usage(prompt_tokens=12, completion_tokens=3, total_tokens=15)
    end = RunCompleted(
        run_id=run_id, agent_id=agent_id, stop_reason="end_turn", usage=usage, step_count=1
    )
    start = RunStarted(
        run_id=run_id,
        agent_id=agent_id,
        messages=[ChatMessage(id=f"message-in-{run_id}", role="user", content="hi")],
        max_steps=10,
    )
    if merged:
        return [start, end.model_copy(update={"answer": answer})]
    return [start, answer, end]


async def projected(
    log: EventLog, pool: asyncpg.Pool, projector: Projector, merged: bool
) -> dict[str, Any]:
    agent_id, run_id = new_id("agent"), new_id("run")
    subject = subjects.agent_subject(agent_id)
    for event in shapes(agent_id, run_id, merged):
        appended = await log.append(
            subject, Envelope.wrap(event, aggregate_id=agent_id, producer="test")
        )
        msg = await log.js.get_msg(subjects.EVENTS_STREAM, appended.seq)
        assert await projector.apply(appended.seq, subject, msg.data or b"") is Outcome.APPLIED
    run = await pool.fetchrow(
        "SELECT status, stop_reason, step_count, usage, last_seq = $2 AS at_the_end"
        " FROM runs WHERE id = $1",
        run_id,
        appended.seq,
    )
    steps = await pool.fetch(
        "SELECT step_number, model, prompt_tokens, completion_tokens, total_tokens,"
        " finish_reason, llm_request_ns FROM steps WHERE run_id = $1",
        run_id,
    )
    said = await pool.fetch(
        "SELECT role, body->>'content' AS content FROM messages WHERE run_id = $1 ORDER BY seq",
        run_id,
    )
    return {
        "run": dict(run) if run else None,
        "steps": [dict(s) for s in steps],
        "messages": [dict(m) for m in said],
    }


async def test_a_run_end_carrying_its_answer_projects_as_the_answer_then_the_end(
    eventlog: EventLog, pool: asyncpg.Pool
) -> None:
    projector = Projector(renamed(runs), pool, eventlog)
    apart = await projected(eventlog, pool, projector, merged=False)
    together = await projected(eventlog, pool, projector, merged=True)
    assert together == apart
    run = together["run"]
    usage = run.pop("usage")
    usage = json.loads(usage) if isinstance(usage, str) else usage
    assert usage["prompt_tokens"] == 12 and usage["total_tokens"] == 15
    assert run == {
        "status": "completed",
        "stop_reason": "end_turn",
        "step_count": 1,
        "at_the_end": True,
    }
    assert [s["step_number"] for s in together["steps"]] == [0]
    assert together["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!"},
    ]
